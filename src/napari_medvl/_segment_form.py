"""The "Segment by prompts" dock's form: its Qt widgets, their layout and the values they hold.

Classes are typed one per line as ``name`` or ``name=synonym, synonym`` (as ``medvl segment
--class``) or filled from an organ preset with its synonyms; the templates are CONCH's H&E
list or none; the grid is one patch grid or patches every 1/2 or 1/4 of their side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magicgui.types import FileDialogMode
from magicgui.widgets import ComboBox, Container, FileEdit, FloatSpinBox, TextEdit
from magicgui.widgets.bases import Widget

from napari_medvl._model_picker import ModelPicker
from napari_medvl._widget_common import JobControls

__all__ = ["CUSTOM", "DEFAULT_MODEL", "DEFAULT_PRESET", "OVERLAPS", "SegmentForm"]

CUSTOM = "custom (type below)"
DEFAULT_MODEL = "medvl-demo"
DEFAULT_PRESET = "synthetic demo slide"
OVERLAPS = {"one patch grid": 1, "patches every 1/2": 2, "patches every 1/4": 4}


class SegmentForm(Container[Widget]):
    """Slide, model, classes (custom or a preset), templates, grid, minimum confidence,
    optional features, the job controls and the area table."""

    def __init__(self, slide_choices: Callable[[], list[tuple[str, Any]]]) -> None:
        """``slide_choices()``: the slide layers to offer."""
        from medvl_engine.prompts import CLASS_PRESETS, TEMPLATE_SETS

        self._slide_source = slide_choices
        self.slide_choice = ComboBox(label="slide", choices=self._slide_choices, nullable=True)
        self.model = ModelPicker("encoder", DEFAULT_MODEL)
        self.preset = ComboBox(label="classes", choices=[CUSTOM, *CLASS_PRESETS], value=CUSTOM)
        self.classes = TextEdit(label="name=synonyms, per line", value="")
        self.templates = ComboBox(label="templates", choices=list(TEMPLATE_SETS), value="conch")
        self.overlap = ComboBox(label="grid", choices=list(OVERLAPS), value="one patch grid")
        self.min_confidence = FloatSpinBox(
            label="uncertain below", value=0.5, min=0.0, max=1.0, step=0.05
        )
        self.features = FileEdit(
            label="features (optional)", mode=FileDialogMode.EXISTING_FILE, nullable=True
        )
        self.controls = JobControls(run_text="Segment slide")
        self.table = TextEdit(label="areas", value="")
        self.table.native.setReadOnly(True)
        super().__init__(
            widgets=[
                self.slide_choice,
                self.model,
                self.preset,
                self.classes,
                self.templates,
                self.overlap,
                self.min_confidence,
                self.features,
                self.controls,
                self.table,
            ]
        )
        self.preset.changed.connect(self._preset_chosen)

    def _slide_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return self._slide_source()

    def refresh_choices(self, _event: Any = None) -> None:
        """Offer the open slide layers again; choose the newest when none is chosen."""
        self.slide_choice.reset_choices()
        if self.slide_choice.value is None:
            choices = self._slide_choices()
            if choices:
                self.slide_choice.value = choices[-1][1]

    def _preset_chosen(self, name: str) -> None:
        from medvl_engine.prompts import CLASS_PRESETS, preset_classes

        if name in CLASS_PRESETS:
            lines = []
            for class_name, names in preset_classes(name).items():
                others = [n for n in names if n != class_name]
                lines.append(f"{class_name}={', '.join(others)}" if others else class_name)
            self.classes.value = "\n".join(lines)

    def class_lines(self) -> list[str]:
        """The non-empty lines of the classes box."""
        return [line.strip() for line in self.classes.value.splitlines() if line.strip()]
