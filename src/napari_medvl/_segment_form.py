"""The "Segment by prompts" dock's form: its Qt widgets, their layout and the values they hold.

Classes are typed one per line as ``name`` or ``name=synonym, synonym`` (as ``medvl segment
--class``) or filled from an organ preset with its synonyms; the templates are CONCH's H&E
list or none; the grid is one patch grid or patches every 1/2 or 1/4 of their side. Under the
area table, the legend: each class's colour on the map and its outlines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magicgui.widgets import ComboBox, FloatSpinBox, TextEdit

from napari_medvl._legend import ClassLegend
from napari_medvl._pathology_dock import CUSTOM, DEFAULT_MODEL, DEFAULT_PRESET, PathologyForm

__all__ = ["CUSTOM", "DEFAULT_MODEL", "DEFAULT_PRESET", "OVERLAPS", "SegmentForm"]

OVERLAPS = {"one patch grid": 1, "patches every 1/2": 2, "patches every 1/4": 4}


class SegmentForm(PathologyForm):
    """Slide, model, classes (custom or a preset), templates, grid, minimum confidence,
    optional features, the job controls, the area table and the legend."""

    def __init__(self, slide_choices: Callable[[], list[tuple[str, Any]]]) -> None:
        """``slide_choices()``: the slide layers to offer."""
        from medvl_engine.prompts import TEMPLATE_SETS

        self.templates = ComboBox(label="templates", choices=list(TEMPLATE_SETS), value="conch")
        self.overlap = ComboBox(label="grid", choices=list(OVERLAPS), value="one patch grid")
        self.min_confidence = FloatSpinBox(
            label="uncertain below", value=0.5, min=0.0, max=1.0, step=0.05
        )
        self.table = TextEdit(label="areas", value="")
        self.table.native.setReadOnly(True)
        super().__init__(
            slide_choices,
            classes_label="name=synonyms, per line",
            run_text="Segment slide",
            options=[self.templates, self.overlap, self.min_confidence],
            results=[self.table],
        )
        self.legend = ClassLegend()
        self.add_qt_widget(self.legend)

    def preset_text(self, name: str) -> str:
        """Organ preset ``name`` as ``class=synonym, synonym`` lines."""
        from medvl_engine.prompts import preset_classes

        lines = []
        for class_name, names in preset_classes(name).items():
            others = [n for n in names if n != class_name]
            lines.append(f"{class_name}={', '.join(others)}" if others else class_name)
        return "\n".join(lines)

    def class_lines(self) -> list[str]:
        """The non-empty lines of the classes box."""
        return [line.strip() for line in self.classes.value.splitlines() if line.strip()]
