"""The "Text prompt heatmap" dock's form: its Qt widgets, their layout and the values they hold.

The form knows nothing of jobs or layers: the choices of its slide and history lists come from
the callables it is given, and :meth:`HeatmapForm.style` reads the overlay style its controls
describe. The controller (``_heatmap_controller``) and the presenter (``_heatmap_presenter``)
read and fill it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magicgui.types import FileDialogMode
from magicgui.widgets import (
    CheckBox,
    ComboBox,
    FileEdit,
    FloatSlider,
    FloatSpinBox,
    LineEdit,
    SpinBox,
)

from napari_medvl._colorbar import ColorBar
from napari_medvl._scrolling_form import ScrollingForm
from napari_medvl._widget_common import JobControls

__all__ = ["BLENDINGS", "DEFAULT_MODEL", "HeatmapForm"]

BLENDINGS = ("translucent", "additive")
DEFAULT_MODEL = "medvl-demo"
MODEL_TOOLTIP = "A registered encoder, a model folder or a Hugging Face id."

Choices = list[tuple[str, Any]]


class HeatmapForm(ScrollingForm):
    """Inputs (slide, model, prompts, features, mode, normalisation, top patches), the job
    controls, the history list, the overlay style and the colour bar of the heatmap dock."""

    def __init__(
        self,
        slide_choices: Callable[[], Choices],
        history_choices: Callable[[str | None], Choices],
    ) -> None:
        """``slide_choices()``: the slide layers to offer; ``history_choices(path)``: the
        earlier results on the slide at ``path`` (None: no slide chosen)."""
        from medvl_engine.colormaps import COLORMAP_CHOICES
        from medvl_engine.prompts import MODES, NORMALIZATIONS

        self._slide_source = slide_choices
        self._history_source = history_choices
        self.slide_choice = ComboBox(label="slide", choices=self._slide_choices, nullable=True)
        self.model = LineEdit(label="model", value=DEFAULT_MODEL, tooltip=MODEL_TOOLTIP)
        self.prompts = LineEdit(
            label="prompts",
            value="tumor",
            tooltip=(
                "cosine: one prompt; softmax: two or more classes separated by ';' (the first is "
                "mapped); contrast: two prompts 'A; B' (A minus B)"
            ),
        )
        self.features = FileEdit(
            label="features",
            mode=FileDialogMode.EXISTING_FILE,
            filter="Features (*.h5 *.pt *.zarr)",
            nullable=True,
            tooltip=(
                "Optional: this slide's features made elsewhere (a medvl .zarr store, a "
                "TRIDENT/CLAM .h5, or a CLAM .pt with its .h5 beside it); empty: extract them."
            ),
        )
        self.mode = ComboBox(label="mode", choices=MODES, value="cosine")
        self.normalization = ComboBox(label="normalise", choices=NORMALIZATIONS, value="none")
        self.range_low = FloatSpinBox(
            label="fixed min",
            value=-1.0,
            min=-10.0,
            max=10.0,
            step=0.05,
            enabled=False,
            tooltip="Score shown at the bottom of the colour map when normalise is 'fixed'.",
        )
        self.range_high = FloatSpinBox(
            label="fixed max",
            value=1.0,
            min=-10.0,
            max=10.0,
            step=0.05,
            enabled=False,
            tooltip="Score shown at the top of the colour map when normalise is 'fixed'.",
        )
        self.top_n = SpinBox(label="top patches", value=10, min=0, max=500)
        self.history_choice = ComboBox(
            label="history",
            choices=self._history_choices,
            nullable=True,
            tooltip="Earlier prompts on this slide: choose one to show it again.",
        )
        self.colormap = ComboBox(
            label="colour map",
            choices=COLORMAP_CHOICES,
            value="auto",
            tooltip="auto: blue-white-red centred on 0 for signed maps, viridis otherwise.",
        )
        self.opacity = FloatSlider(label="opacity", value=0.5, min=0.0, max=1.0, step=0.05)
        self.hide_below = CheckBox(label="hide below", value=False)
        self.threshold = FloatSpinBox(
            label="threshold",
            value=0.0,
            min=-10.0,
            max=10.0,
            step=0.01,
            tooltip="With 'hide below' on, cells scoring under this value are transparent.",
        )
        self.blending = ComboBox(label="blending", choices=BLENDINGS, value="translucent")
        self.controls = JobControls(run_text="Run")
        self.colorbar = ColorBar()
        super().__init__(
            widgets=[
                self.slide_choice,
                self.model,
                self.prompts,
                self.features,
                self.mode,
                self.normalization,
                self.range_low,
                self.range_high,
                self.top_n,
                self.controls,
                self.history_choice,
                self.colormap,
                self.blending,
                self.opacity,
                self.hide_below,
                self.threshold,
            ]
        )
        self.add_qt_widget(self.colorbar)
        self._fix_sizes()
        self.normalization.changed.connect(self._normalization_changed)

    def _fix_sizes(self) -> None:
        """Text that changes (status, history labels) wraps or elides instead of widening the
        dock, so results never re-lay out the window and the canvas keeps its size."""
        from qtpy.QtWidgets import QComboBox, QSizePolicy

        progress = self.controls.progress.native
        policy = progress.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        progress.setSizePolicy(policy)
        status = self.controls.status.native  # wraps already (JobControls)
        status.setFixedHeight(3 * status.fontMetrics().lineSpacing())
        status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        notice = self.controls.notice.native
        notice.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        notice.setFixedHeight(2 * notice.fontMetrics().lineSpacing())
        policy = notice.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        notice.setSizePolicy(policy)
        policy = progress.sizePolicy()
        policy.setHorizontalPolicy(QSizePolicy.Policy.Ignored)
        progress.setSizePolicy(policy)
        for combo in (self.history_choice.native, self.slide_choice.native):
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(16)

    def _slide_choices(self, _widget: Any = None) -> Choices:
        return self._slide_source()

    def _history_choices(self, _widget: Any = None) -> Choices:
        layer = self.slide_choice.value if hasattr(self, "slide_choice") else None
        path = layer.metadata.get("path") if layer is not None else None
        return self._history_source(path)

    def refresh_slides(self, _event: Any = None) -> None:
        """Offer the open slide layers again; bind the newest when none is chosen."""
        self.slide_choice.reset_choices()
        if self.slide_choice.value is None and self.slide_choice.choices:
            self.slide_choice.value = self.slide_choice.choices[-1]

    def _normalization_changed(self, value: str) -> None:
        fixed = value == "fixed"
        self.range_low.enabled = fixed
        self.range_high.enabled = fixed

    def model_name(self) -> str:
        """The model field's text, or the demo model when it is empty."""
        return str(self.model.value).strip() or DEFAULT_MODEL

    def style(self) -> dict[str, Any]:
        """The overlay style the dock's controls describe (see ``heatmap_layers``)."""
        return {
            "colormap": self.colormap.value,
            "opacity": float(self.opacity.value),
            "blending": self.blending.value,
            "threshold": float(self.threshold.value) if self.hide_below.value else None,
        }
