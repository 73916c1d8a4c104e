"""Dock widget "Segment by prompts": a tissue map of classes given by prompts, with areas.

The user picks a slide layer, a model and classes (one per line, ``name=synonym, ...``, or an
organ preset with its synonyms), the templates (CONCH's H&E list or none) and the grid; Run
maps every cell of the tissue to its most probable class (or "uncertain"), shown as one labels
layer per slide, ``tissue map: <slide>``, with each class's area and share of the tissue in the
dock (:func:`medvl_engine.pathology.segment`, the call ``medvl segment`` makes). Work runs off
the GUI thread; Ctrl+Enter runs.

The dock is its form (``_segment_form``), wired to its controller (``_segment_controller``:
checks the inputs, runs the job) and its presenter (``_segment_presenter``: table and layer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_medvl._segment_controller import SegmentController
from napari_medvl._segment_form import DEFAULT_PRESET, SegmentForm
from napari_medvl._segment_job import SegmentCache, SegmentOutcome, SegmentRequest
from napari_medvl._segment_presenter import SegmentPresenter
from napari_medvl._slide_layers import SLIDE_KIND
from napari_medvl._widget_common import layers_of_kind

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = ["SegmentWidget"]


class SegmentWidget(SegmentForm):
    """Segmentation of a slide into classes given by prompts."""

    def __init__(self, napari_viewer: napari.Viewer, cache: SegmentCache | None = None) -> None:
        self._viewer = napari_viewer
        self.presenter = SegmentPresenter(napari_viewer, self)
        super().__init__(slide_choices=lambda: layers_of_kind(napari_viewer, SLIDE_KIND))
        self.controller = SegmentController(
            napari_viewer,
            self,
            cache if cache is not None else SegmentCache(),
            on_result=self.presenter.show_outcome,
        )
        self.controls.run_button.changed.connect(self.run)
        self.model.combo.changed.connect(self.controller.model_changed)
        self.controls.bind_run_key(self.run, self.native)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self.refresh_choices)
        self.refresh_choices()
        self.preset.value = DEFAULT_PRESET
        self.controller.model_changed()

    @property
    def cache(self) -> SegmentCache:
        """Models kept between runs."""
        return self.controller.cache

    @property
    def runner(self) -> JobRunner:
        """The runner of the dock's segmentation jobs."""
        return self.controller.runner

    @property
    def last_outcome(self) -> SegmentOutcome | None:
        """The result shown last."""
        return self.presenter.last_outcome

    def request(self) -> SegmentRequest | None:
        """The request the form's inputs describe, or None (with a notification)."""
        return self.controller.request()

    def run(self, _value: Any = None) -> Any:
        """Start the segmentation (cancelling a running one); returns the worker or None."""
        return self.controller.run()

    def layer_name(self, outcome: SegmentOutcome | None = None) -> str:
        """Name of the slide's map layer: ``tissue map: <slide file>``."""
        return self.presenter.layer_name(outcome)
