"""The "Slide classification" dock's form: its Qt widgets, their layout and the values they hold.

Class prompts are typed one per line or filled from an organ preset; the "show attention of"
list offers the classes the given callable names (the last result's, best first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magicgui.widgets import ComboBox, FloatSpinBox, TextEdit

from napari_medvl._colorbar import ColorBar
from napari_medvl._pathology_dock import CUSTOM, DEFAULT_MODEL, DEFAULT_PRESET, PathologyForm

__all__ = ["CUSTOM", "DEFAULT_MODEL", "DEFAULT_PRESET", "ClassifyForm", "parse_classes"]


def parse_classes(text: str) -> tuple[str, ...]:
    """One class per line (or separated by ';'), stripped, empties and repeats dropped."""
    seen: list[str] = []
    for part in text.replace(";", "\n").splitlines():
        name = part.strip()
        if name and name not in seen:
            seen.append(name)
    return tuple(seen)


class ClassifyForm(PathologyForm):
    """Slide, model, classes (custom or a preset), tau_attn, optional features, the job
    controls, the ranking, the class whose attention is shown and the colour bar."""

    def __init__(
        self,
        slide_choices: Callable[[], list[tuple[str, Any]]],
        class_choices: Callable[[], list[str]],
    ) -> None:
        """``slide_choices()``: the slide layers to offer; ``class_choices()``: the classes
        whose attention can be shown."""
        self._class_source = class_choices
        self.tau = FloatSpinBox(
            label="tau_attn (0 = model's)", value=0.0, min=0.0, max=10.0, step=0.01
        )
        self.ranking = TextEdit(label="ranking", value="")
        self.ranking.native.setReadOnly(True)
        self.shown_class = ComboBox(
            label="show attention of", choices=self._class_choices, nullable=True
        )
        super().__init__(
            slide_choices,
            classes_label="one per line",
            run_text="Classify slide",
            options=[self.tau],
            results=[self.ranking, self.shown_class],
        )
        self.colorbar = ColorBar()
        self.add_qt_widget(self.colorbar)

    def _class_choices(self, _widget: Any = None) -> list[str]:
        """A callable, so napari's reset keeps them."""
        return self._class_source()

    def class_names(self) -> tuple[str, ...]:
        """The classes typed (or filled from the preset)."""
        return parse_classes(self.classes.value)
