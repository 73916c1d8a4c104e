"""Dock widget "Mammogram TopK": a CC + MLO pair, a model, K -> ranked boxes, importance, readouts.

Also the reading-room habits: "Hang views" places the R CC, L CC, R MLO and L MLO layers in
the usual four-view layout with the chest walls facing (the chest-wall side is measured off the
GUI thread), and "Reset window" puts every mammogram back on its DICOM VOI window (the display
pipeline maps that window to 0..1). K's maximum follows the chosen model's candidate patches.
Ctrl+Enter runs.

The dock is its form (``_topk_form``: the Qt widgets and their values), wired to its controller
(``_topk_controller``: checks the pair, runs the jobs off the GUI thread, loads models) and its
presenter (``_topk_presenter``: result layers added empty before any result and filled one per
event-loop turn, colour bar, readouts, the hanging).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from napari_medvl._colorbar import legend_layer
from napari_medvl._mammogram_layers import MAMMOGRAM_KIND
from napari_medvl._topk_controller import TopKController
from napari_medvl._topk_form import DEFAULT_MODEL, TopKForm
from napari_medvl._topk_job import TopKOutcome, TopKRequest
from napari_medvl._topk_presenter import LEGEND_KINDS, TopKPresenter
from napari_medvl._widget_common import layers_of_kind

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = ["DEFAULT_MODEL", "TopKWidget"]


class TopKWidget(TopKForm):
    """TopK-Patch on a CC + MLO pair of mammogram layers."""

    def __init__(self, napari_viewer: napari.Viewer) -> None:
        self._viewer = napari_viewer
        super().__init__(lambda: layers_of_kind(napari_viewer, MAMMOGRAM_KIND))
        self.controller = TopKController(
            napari_viewer,
            self,
            on_result=self._show_outcome,
            on_hung=self._apply_hanging,
            on_voi=self._apply_voi,
        )
        self.presenter = TopKPresenter(napari_viewer, self, self.controller)
        self.controls.run_button.changed.connect(self.run)
        self.hang_button.changed.connect(self.hang)
        self.reset_window_button.changed.connect(self.reset_window)
        self.model.combo.changed.connect(self.controller.model_changed)
        self.voi.changed.connect(self.choose_voi)
        self.cc_choice.changed.connect(self.refresh_voi)
        self.cc_choice.changed.connect(self.presenter.prepare_layers_soon)
        self.mlo_choice.changed.connect(self.presenter.prepare_layers_soon)
        self.controls.bind_run_key(self.run, self.native)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self.refresh_choices)
        napari_viewer.layers.selection.events.active.connect(self.presenter.legend_for_active)
        shown = legend_layer(napari_viewer, LEGEND_KINDS)  # a map opened before the dock
        if shown is not None:
            self.presenter.show_existing(shown)
        self.refresh_choices()
        self.controller.model_changed()
        self.presenter.prepare_layers_soon()

    # --- state the controller and presenter keep -----------------------------------------
    @property
    def runner(self) -> JobRunner:
        """The runner of the dock's TopK jobs."""
        return self.controller.runner

    @property
    def _hang_runner(self) -> JobRunner:
        return self.controller.hang_runner

    @property
    def _voi_runner(self) -> JobRunner:
        return self.controller.voi_runner

    @property
    def models(self) -> dict[str, Any]:
        """Loaded TopK models by name (LoadedElsewhere: loaded in the model process)."""
        return self.controller.models

    @property
    def _loading(self) -> dict[str, threading.Event]:
        return self.controller.loading

    @property
    def last_outcome(self) -> TopKOutcome | None:
        """The result shown last."""
        return self.presenter.last_outcome

    @property
    def outcomes(self) -> dict[str | None, TopKOutcome]:
        """The result shown last for each breast (laterality)."""
        return self.presenter.outcomes

    @property
    def drawing(self) -> bool:
        """True while result layers are still being filled (one per event-loop turn)."""
        return self.presenter.drawing

    # --- actions -------------------------------------------------------------------------
    def request(self) -> TopKRequest | None:
        """The request the chosen views describe, or None (with a notification)."""
        return self.controller.request()

    def run(self, _value: Any = None) -> Any:
        """Start TopK on the chosen views (cancelling a running job); returns the worker or None."""
        return self.controller.run()

    def choose_voi(self, index: Any = None) -> Any:
        """Re-read every DICOM mammogram with VOI ``index``; returns the worker or None."""
        return self.controller.choose_voi(index)

    def hang(self, _value: Any = None) -> Any:
        """Measure chest-wall sides off the GUI thread, then hang the views; returns the worker."""
        return self.controller.hang()

    def reset_window(self, _value: Any = None) -> None:
        """Every mammogram back on its DICOM VOI window (display values 0..1) and gray map."""
        self.presenter.reset_window()

    def _show_outcome(self, outcome: TopKOutcome) -> None:
        self.presenter.show_outcome(outcome)

    def _apply_hanging(self, sides: dict[Any, str]) -> None:
        self.presenter.apply_hanging(sides)

    def _apply_voi(self, reopened: dict[Any, Any]) -> None:
        self.presenter.apply_voi(reopened)
