"""Dock widget "Text prompt heatmap": a slide, a model, prompts -> heatmap and top patches.

The dock is its form (``_heatmap_form``: the Qt widgets and their values), wired to its
controller (``_heatmap_controller``: checks the inputs, runs ``heatmap_job`` in a thread worker,
a new request cancelling the running one, and writes the status) and its presenter
(``_heatmap_presenter``: turns the engine's results into layers, keeps the history and the
colour bar); it holds no model math and reads no files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_medvl._colorbar import legend_layer
from napari_medvl._event_turns import later
from napari_medvl._heatmap_controller import HeatmapController
from napari_medvl._heatmap_form import BLENDINGS, HeatmapForm
from napari_medvl._heatmap_job import FeatureCache, HeatmapOutcome, HeatmapRequest
from napari_medvl._heatmap_overlay import HeatmapHistory
from napari_medvl._heatmap_presenter import LEGEND_KINDS, HeatmapPresenter
from napari_medvl._slide_layers import SLIDE_KIND
from napari_medvl._widget_common import layers_of_kind

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = ["BLENDINGS", "TOGGLE_KEY", "HeatmapWidget"]

MODEL_WORK_DELAY_MS = 1500  # the latest start of the background work when no slide is bound
TOGGLE_KEY = "Control-Shift-H"  # shows / hides the heatmap shown last, from anywhere in napari


class HeatmapWidget(HeatmapForm):
    """Text prompt heatmap over a whole-slide image layer."""

    def __init__(
        self, napari_viewer: napari.Viewer, cache: FeatureCache | None = None, preload: bool = True
    ) -> None:
        """``preload``: load the model in the background now, so the first Run starts at the
        slide (a first overlay within seconds) instead of at loading the model."""
        self._viewer = napari_viewer
        self.history = HeatmapHistory()
        super().__init__(
            slide_choices=lambda: layers_of_kind(napari_viewer, SLIDE_KIND),
            history_choices=lambda path: [
                (entry.label, entry) for entry in self.history.for_slide(path)
            ],
        )
        self.controller = HeatmapController(
            napari_viewer,
            self,
            cache if cache is not None else FeatureCache(),
            on_result=self._show_outcome,
            on_partial=self._show_partial,
            preload=preload,
        )
        self.presenter = HeatmapPresenter(napari_viewer, self, self.controller, self.history)
        self.runner.displaying = lambda: self.presenter.finishing
        self.controls.run_button.changed.connect(self.run)
        self.controls.cancel_button.changed.connect(self.controller.cancelled)
        self.prompts.native.returnPressed.connect(self.run)
        self.model.changed.connect(self.controller.show_notice)
        self.history_choice.changed.connect(self.presenter.history_chosen)
        self.slide_choice.changed.connect(self.presenter.prepare_overlay_soon)
        self.mode.changed.connect(self.presenter.prepare_overlay_soon)
        for control in (
            self.colormap,
            self.opacity,
            self.hide_below,
            self.threshold,
            self.blending,
        ):
            control.changed.connect(self.presenter.restyle)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self.refresh_slides)
        napari_viewer.layers.events.removed.connect(self.presenter.layer_removed)
        napari_viewer.layers.selection.events.active.connect(self.presenter.legend_for_active)
        shown = legend_layer(napari_viewer, LEGEND_KINDS)  # a map opened before the dock
        if shown is not None:
            self.colorbar.show_overlay(shown)
        self.refresh_slides()  # binding a slide prepares its overlay layers
        self.controller.show_notice()
        self.controls.bind_run_key(self.run, self.native)
        later(self.native, MODEL_WORK_DELAY_MS, self.controller.start_model_work)
        napari_viewer.bind_key(TOGGLE_KEY, self.toggle_overlay, overwrite=True)

    @property
    def cache(self) -> FeatureCache:
        """Features, models and partial extractions kept between runs."""
        return self.controller.cache

    @cache.setter
    def cache(self, cache: FeatureCache) -> None:
        self.controller.cache = cache

    @property
    def runner(self) -> JobRunner:
        """The runner of the dock's heatmap jobs."""
        return self.controller.runner

    @property
    def last_outcome(self) -> HeatmapOutcome | None:
        """The result shown last (a new one or one chosen from the history)."""
        return self.presenter.last_outcome

    @property
    def _model_work_started(self) -> bool:
        return self.controller.model_work_started

    def request(self) -> HeatmapRequest | None:
        """The request the current inputs describe, or None (with a notification) if incomplete."""
        return self.controller.request()

    def run(self, _value: Any = None) -> Any:
        """Start a heatmap request (cancelling a running one); returns the worker or None."""
        return self.controller.run()

    def demo_notice(self) -> str | None:
        """The demo notice of the model in the form (None for other models)."""
        return self.controller.demo_notice()

    def toggle_overlay(self, _viewer: Any = None) -> None:
        """Show or hide the heatmap layer of the result shown last (and its top patches)."""
        self.presenter.toggle_overlay()

    def _show_outcome(self, outcome: HeatmapOutcome) -> None:
        self.presenter.show_outcome(outcome)

    def _show_partial(self, update: Any) -> None:
        self.presenter.show_partial(update)
