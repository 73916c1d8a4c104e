"""Dock widget "Text prompt heatmap": a slide, a model, prompts -> heatmap and top patches.

The widget collects inputs, runs ``heatmap_job`` in a thread worker (a new
request cancels the running one) and turns the engine's results into layers
with the builders of ``_layers``; it holds no model math and reads no files.
"""

from __future__ import annotations

from typing import Any

from magicgui.widgets import ComboBox, Container, FileEdit, LineEdit, SpinBox

from napari_medvl._heatmap_job import (
    FeatureCache,
    HeatmapOutcome,
    HeatmapRequest,
    heatmap_job,
    parse_prompts,
)
from napari_medvl._layers import SLIDE_KIND, heatmap_result_layers
from napari_medvl._notify import report_error
from napari_medvl._widget_common import JobControls, layers_of_kind, upsert_layer

__all__ = ["BLENDINGS", "HeatmapWidget"]

BLENDINGS = ("translucent", "additive")


def _model_tooltip() -> str:
    from medvl_engine.encoders import available_encoders

    names = ", ".join(entry.name for entry in available_encoders())
    return f"A registered encoder ({names}), a model folder or a Hugging Face id."


class HeatmapWidget(Container):
    """Text prompt heatmap over a whole-slide image layer."""

    def __init__(self, napari_viewer: Any, cache: FeatureCache | None = None) -> None:
        from medvl_engine.heatmap import MODES, NORMALIZATIONS

        self._viewer = napari_viewer
        self.cache = cache if cache is not None else FeatureCache()
        self.slide_choice = ComboBox(label="slide", choices=self._slide_choices, nullable=True)
        self.model = LineEdit(label="model", value="medvl-demo", tooltip=_model_tooltip())
        self.prompts = LineEdit(
            label="prompts", value="tumor", tooltip="one prompt, or several separated by ';'"
        )
        self.features = FileEdit(
            label="features",
            mode="r",
            filter="Features (*.h5 *.pt *.zarr)",
            nullable=True,
            tooltip=(
                "Optional: this slide's features made elsewhere (a medvl .zarr store, a "
                "TRIDENT/CLAM .h5, or a CLAM .pt with its .h5 beside it); empty: extract them."
            ),
        )
        self.mode = ComboBox(label="mode", choices=MODES, value="cosine")
        self.normalization = ComboBox(label="normalise", choices=NORMALIZATIONS, value="none")
        self.top_n = SpinBox(label="top patches", value=10, min=0, max=500)
        self.blending = ComboBox(label="blending", choices=BLENDINGS, value="translucent")
        self.controls = JobControls(run_text="Run")
        super().__init__(
            widgets=[
                self.slide_choice,
                self.model,
                self.prompts,
                self.features,
                self.mode,
                self.normalization,
                self.top_n,
                self.blending,
                self.controls,
            ]
        )
        self.last_outcome: HeatmapOutcome | None = None
        self.runner = self.controls.bind(self._show_outcome)
        self.controls.run_button.changed.connect(self.run)
        self.prompts.native.returnPressed.connect(self.run)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self._refresh_choices)
        self._refresh_choices()

    def _slide_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return layers_of_kind(self._viewer, SLIDE_KIND)

    def _refresh_choices(self, _event: Any = None) -> None:
        self.slide_choice.reset_choices()
        if self.slide_choice.value is None and self.slide_choice.choices:
            self.slide_choice.value = self.slide_choice.choices[-1]

    def request(self) -> HeatmapRequest | None:
        """The request the current inputs describe, or None (with a notification) if incomplete."""
        from medvl_engine.errors import ConfigError

        layer = self.slide_choice.value
        prompts = parse_prompts(self.prompts.value)
        problem = None
        if layer is None:
            problem = "No slide layer is open: open a slide (File > Open) and choose it here."
        elif not prompts:
            problem = "The prompt is empty: type what to look for, e.g. 'tumor'."
        elif self.mode.value == "contrast" and len(prompts) != 2:
            problem = "Contrast mode needs exactly two prompts separated by ';' (A minus B)."
        elif self.mode.value == "softmax" and len(prompts) < 2:
            problem = "Softmax mode needs two or more prompts separated by ';'."
        if problem is not None:
            report_error(ConfigError(problem))
            return None
        return HeatmapRequest(
            slide=layer.metadata["slide"],
            model=self.model.value.strip() or "medvl-demo",
            prompts=tuple(prompts),
            mode=self.mode.value,
            normalization=self.normalization.value,
            top_n=int(self.top_n.value),
            features=self.features.value or None,
        )

    def run(self, _value: Any = None) -> Any:
        """Start a heatmap request (cancelling a running one); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        return self.runner.start(heatmap_job, request, self.cache)

    def _show_outcome(self, outcome: HeatmapOutcome) -> None:
        self.last_outcome = outcome
        layer = self.slide_choice.value
        frame = layer.metadata["world_frame"] if layer is not None else None
        for layer_data in heatmap_result_layers(outcome, frame, blending=self.blending.value):
            upsert_layer(self._viewer, layer_data)
        self.controls.status.value = (
            "Features extracted; new prompts are instant." if outcome.extracted else "Done."
        )
