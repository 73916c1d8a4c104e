"""The "Slide classification" dock's form: its Qt widgets, their layout and the values they hold.

Class prompts are typed one per line or filled from an organ preset; the "show attention of"
list offers the classes the given callable names (the last result's, best first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magicgui.types import FileDialogMode
from magicgui.widgets import ComboBox, Container, FileEdit, FloatSpinBox, TextEdit
from magicgui.widgets.bases import Widget

from napari_medvl._colorbar import ColorBar
from napari_medvl._model_picker import ModelPicker
from napari_medvl._widget_common import JobControls

__all__ = ["CUSTOM", "DEFAULT_MODEL", "DEFAULT_PRESET", "ClassifyForm", "parse_classes"]

CUSTOM = "custom (type below)"
DEFAULT_MODEL = "medvl-demo"
DEFAULT_PRESET = "synthetic demo slide"


def parse_classes(text: str) -> tuple[str, ...]:
    """One class per line (or separated by ';'), stripped, empties and repeats dropped."""
    seen: list[str] = []
    for part in text.replace(";", "\n").splitlines():
        name = part.strip()
        if name and name not in seen:
            seen.append(name)
    return tuple(seen)


class ClassifyForm(Container[Widget]):
    """Slide, model, classes (custom or a preset), tau_attn, optional features, the job
    controls, the ranking, the class whose attention is shown and the colour bar."""

    def __init__(
        self,
        slide_choices: Callable[[], list[tuple[str, Any]]],
        class_choices: Callable[[], list[str]],
    ) -> None:
        """``slide_choices()``: the slide layers to offer; ``class_choices()``: the classes
        whose attention can be shown."""
        from medvl_engine.prompts import CLASS_PRESETS

        self._slide_source = slide_choices
        self._class_source = class_choices
        self.slide_choice = ComboBox(label="slide", choices=self._slide_choices, nullable=True)
        self.model = ModelPicker("encoder", DEFAULT_MODEL)
        self.preset = ComboBox(label="classes", choices=[CUSTOM, *CLASS_PRESETS], value=CUSTOM)
        self.classes = TextEdit(label="one per line", value="")
        self.tau = FloatSpinBox(
            label="tau_attn (0 = model's)", value=0.0, min=0.0, max=10.0, step=0.01
        )
        self.features = FileEdit(
            label="features (optional)",
            mode=FileDialogMode.EXISTING_FILE,
            nullable=True,
        )
        self.controls = JobControls(run_text="Classify slide")
        self.ranking = TextEdit(label="ranking", value="")
        self.ranking.native.setReadOnly(True)
        self.shown_class = ComboBox(
            label="show attention of", choices=self._class_choices, nullable=True
        )
        super().__init__(
            widgets=[
                self.slide_choice,
                self.model,
                self.preset,
                self.classes,
                self.tau,
                self.features,
                self.controls,
                self.ranking,
                self.shown_class,
            ]
        )
        self.colorbar = ColorBar()
        self.native.layout().addWidget(self.colorbar)
        self.preset.changed.connect(self._preset_chosen)

    def _slide_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return self._slide_source()

    def _class_choices(self, _widget: Any = None) -> list[str]:
        """A callable, so napari's reset keeps them."""
        return self._class_source()

    def refresh_choices(self, _event: Any = None) -> None:
        """Offer the open slide layers again; choose the newest when none is chosen."""
        self.slide_choice.reset_choices()
        if self.slide_choice.value is None:
            choices = self._slide_choices()
            if choices:
                self.slide_choice.value = choices[-1][1]

    def _preset_chosen(self, name: str) -> None:
        from medvl_engine.prompts import CLASS_PRESETS

        if name in CLASS_PRESETS:
            self.classes.value = "\n".join(CLASS_PRESETS[name])

    def class_names(self) -> tuple[str, ...]:
        """The classes typed (or filled from the preset)."""
        return parse_classes(self.classes.value)
