"""The "Mammogram TopK" dock's form: its Qt widgets, their layout and the values they hold.

The mammogram lists offer the layers the given callable names and choose a CC and an MLO
view by themselves; the VOI list offers the transforms the chosen CC file holds; K's maximum
is set from the model's candidate patches (:meth:`TopKForm.set_k_limit`) and its value from
the K the model was evaluated with (:meth:`TopKForm.set_evaluated_k`), which the line under
K names, saying so when the chosen K departs from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magicgui.widgets import ComboBox, Container, Label, PushButton, SpinBox, TextEdit

from napari_medvl._colorbar import ColorBar
from napari_medvl._model_picker import ModelPicker
from napari_medvl._scrolling_form import ScrollingForm
from napari_medvl._widget_common import JobControls

__all__ = ["DEFAULT_MODEL", "K_LIMIT_UNKNOWN", "TopKForm"]

DEFAULT_MODEL = "topksiglip-demo"
K_LIMIT_UNKNOWN = 256

Choices = list[tuple[str, Any]]


class TopKForm(ScrollingForm):
    """CC and MLO choices, model, K, VOI, the hanging buttons, job controls, zero-shot
    readouts and colour bar of the TopK dock."""

    def __init__(self, mammogram_choices: Callable[[], Choices]) -> None:
        """``mammogram_choices()``: the mammogram layers to offer."""
        self._mammogram_source = mammogram_choices
        self.cc_choice = ComboBox(label="CC", choices=self._mammogram_choices, nullable=True)
        self.mlo_choice = ComboBox(label="MLO", choices=self._mammogram_choices, nullable=True)
        self.model = ModelPicker("topksiglip", DEFAULT_MODEL)
        self.model.labels = False  # the row's own label names it: "model", once
        self.evaluated_k: int | None = None
        self.k = SpinBox(label="K", value=15, min=1, max=K_LIMIT_UNKNOWN)
        self.k_note = Label(label="", value="")
        self.k.changed.connect(self._show_k_note)
        self.voi = ComboBox(label="VOI", choices=self._voi_choices)
        self.hang_button = PushButton(text="Hang views (R | L, CC over MLO)")
        self.reset_window_button = PushButton(text="Reset window (DICOM VOI)")
        self.controls = JobControls(run_text="Run TopK")
        self.readouts = TextEdit(label="zero-shot", value="")
        self.readouts.native.setReadOnly(True)
        super().__init__(
            widgets=[
                self.cc_choice,
                self.mlo_choice,
                self.model,
                self.k,
                self.k_note,
                self.voi,
                Container(
                    widgets=[self.hang_button, self.reset_window_button],
                    layout="horizontal",
                    labels=False,
                ),
                self.controls,
                self.readouts,
            ]
        )
        self.colorbar = ColorBar()
        self.add_qt_widget(self.colorbar)

    def _mammogram_choices(self, _widget: Any = None) -> Choices:
        return self._mammogram_source()

    def refresh_choices(self, _event: Any = None) -> None:
        """Offer the open mammograms again; choose the newest CC and MLO view where none is."""
        self.refresh_voi()
        for choice, view in ((self.cc_choice, "CC"), (self.mlo_choice, "MLO")):
            choice.reset_choices()
            if choice.value is None:
                matching = [
                    layer
                    for _, layer in self._mammogram_choices()
                    if layer.metadata.get("view") == view
                ]
                if matching:
                    choice.value = matching[-1]

    def _voi_choices(self, _widget: Any = None) -> list[tuple[str, int]]:
        """The VOI transforms the chosen CC file offers (window centre/width, VOI LUTs)."""
        layer = self.cc_choice.value
        mammogram = layer.metadata.get("mammogram") if layer is not None else None
        names = list(getattr(mammogram, "voi_choices", None) or [])
        if not names:
            return [(f"the file's display ({getattr(mammogram, 'voi', 'none')})", 0)]
        return [(name, index) for index, name in enumerate(names)]

    def refresh_voi(self, _value: Any = None) -> None:
        """Offer the chosen CC file's VOI transforms again, without applying one."""
        with self.voi.changed.blocked():
            self.voi.reset_choices()

    def set_k_limit(self, candidates: int) -> None:
        """Cap K at ``candidates`` (lowering the current K when above)."""
        if self.k.value > candidates:
            self.k.value = candidates
        self.k.max = candidates
        self.k.tooltip = f"patches to mark, at most the model's {candidates} candidates"

    def set_evaluated_k(self, evaluated: int | None) -> None:
        """Set K to the K the model was evaluated with (None: unknown; K stays) and name it."""
        self.evaluated_k = evaluated
        if evaluated is not None:
            self.k.value = min(evaluated, int(self.k.max))
        self._show_k_note()

    def _show_k_note(self, _value: Any = None) -> None:
        """The line under K: the evaluated K, and a warning when the chosen K departs."""
        evaluated = self.evaluated_k
        if evaluated is None:
            self.k_note.value = ""
        elif int(self.k.value) == evaluated:
            self.k_note.value = f"evaluated at K = {evaluated}"
        else:
            chosen = int(self.k.value)
            self.k_note.value = f"evaluated at K = {evaluated}; K = {chosen} departs from it"
        self.k_note.tooltip = (
            "The model's reported metrics were measured at this K; another K gives other "
            "boxes, scores and readouts."
        )

    def model_name(self) -> str:
        """The chosen model, or the demo model when the field is empty."""
        return str(self.model.value).strip() or DEFAULT_MODEL
