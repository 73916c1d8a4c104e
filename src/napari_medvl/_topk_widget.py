"""Dock widget "Mammogram TopK": CC and MLO layers, a model, K -> boxes, importance, readouts."""

from __future__ import annotations

from typing import Any

from magicgui.widgets import ComboBox, Container, LineEdit, SpinBox, TextEdit

from napari_medvl._layers import MAMMOGRAM_KIND, WorldFrame, topk_layers
from napari_medvl._notify import report_error
from napari_medvl._topk_job import TopKOutcome, TopKRequest, format_readouts, topk_job
from napari_medvl._widget_common import JobControls, layers_of_kind, upsert_layer

__all__ = ["TopKWidget"]


class TopKWidget(Container):
    """TopK-Patch on a CC + MLO pair of mammogram layers."""

    def __init__(self, napari_viewer: Any) -> None:
        self._viewer = napari_viewer
        self.models: dict[str, Any] = {}
        self.cc_choice = ComboBox(label="CC", choices=self._mammogram_choices, nullable=True)
        self.mlo_choice = ComboBox(label="MLO", choices=self._mammogram_choices, nullable=True)
        self.model = LineEdit(label="model", value="topksiglip-demo")
        self.k = SpinBox(label="K", value=15, min=1, max=256)
        self.controls = JobControls(run_text="Run TopK")
        self.readouts = TextEdit(label="zero-shot", value="")
        self.readouts.native.setReadOnly(True)
        super().__init__(
            widgets=[
                self.cc_choice,
                self.mlo_choice,
                self.model,
                self.k,
                self.controls,
                self.readouts,
            ]
        )
        self.last_outcome: TopKOutcome | None = None
        self.runner = self.controls.bind(self._show_outcome)
        self.controls.run_button.changed.connect(self.run)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self._refresh_choices)
        self._refresh_choices()

    def _mammogram_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return layers_of_kind(self._viewer, MAMMOGRAM_KIND)

    def _refresh_choices(self, _event: Any = None) -> None:
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

    def request(self) -> TopKRequest | None:
        from medvl_engine.errors import ConfigError

        cc, mlo = self.cc_choice.value, self.mlo_choice.value
        if cc is None or mlo is None or cc is mlo:
            report_error(
                ConfigError(
                    "TopK needs two different mammogram layers, a CC and an MLO view of one "
                    "breast: open both and choose them here."
                )
            )
            return None
        return TopKRequest(
            cc=cc.metadata["mammogram"],
            mlo=mlo.metadata["mammogram"],
            model=self.model.value.strip() or "topksiglip-demo",
            k=int(self.k.value),
        )

    def run(self, _value: Any = None) -> Any:
        """Start TopK on the chosen views (cancelling a running job); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        return self.runner.start(topk_job, request, self.models)

    def _show_outcome(self, outcome: TopKOutcome) -> None:
        self.last_outcome = outcome
        cc, mlo = self.cc_choice.value, self.mlo_choice.value
        frames = {
            "CC": WorldFrame.from_dict(cc.metadata["world_frame"]),
            "MLO": WorldFrame.from_dict(mlo.metadata["world_frame"]),
        }
        laterality = cc.metadata.get("laterality")
        sources = {"CC": cc.metadata.get("path"), "MLO": mlo.metadata.get("path")}
        for layer_data in topk_layers(
            outcome.result, outcome.breast, frames, laterality, sources=sources
        ):
            upsert_layer(self._viewer, layer_data)
        self.readouts.value = format_readouts(outcome.result.zero_shot)
        self.controls.status.value = f"Top {outcome.request.k} patches shown."
