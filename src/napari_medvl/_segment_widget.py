"""Dock widget "Segment by prompts": a tissue map of classes given by prompts, with areas.

The user picks a slide layer, a model and classes (one per line, ``name=synonym, ...``, or an
organ preset with its synonyms), the templates (CONCH's H&E list or none) and the grid; Run
maps every cell of the tissue to its most probable class (or "uncertain"), shown as a labels
layer per slide, ``tissue map: <slide>``, with its regions' outlines as a shapes layer,
``regions: <slide>``, each class's area and share of the tissue in the dock and a legend of
the class colours (what :func:`medvl_engine.pathology.segment`, ``medvl segment``, computes).
Work runs in the model process (napari's own process never imports torch), or in threads
where no process can start; Ctrl+Enter runs. Features, tissue mask and class embeddings are
kept (in the model process), so a run with a changed class list only encodes the new classes'
text, and that text is encoded while the user pauses at the list (``PREFETCH_MS`` after the
last keystroke), so the run finds it ready; a run that must encode it first shows the map of
the classes known already, then the complete map. Painting on the labels layer recounts the
areas and redraws the outlines.

The dock is its form (``_segment_form``), wired to its controller (``_segment_controller``:
checks the inputs, runs the job) and its presenter (``_segment_presenter``: table, legend and
layers) as every prompt-scoring slide dock is (``_pathology_dock``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtpy.QtCore import QTimer

from napari_medvl._pathology_dock import PathologyDock
from napari_medvl._segment_controller import SegmentController
from napari_medvl._segment_form import SegmentForm
from napari_medvl._segment_job import SegmentCache, SegmentOutcome, SegmentRequest
from napari_medvl._segment_presenter import SegmentPresenter

if TYPE_CHECKING:
    import napari

__all__ = ["PREFETCH_MS", "SegmentWidget"]

PREFETCH_MS = 300
"""Pause after the last change of the class list before its new classes' text is encoded."""


class SegmentWidget(PathologyDock[SegmentCache, SegmentRequest, SegmentOutcome], SegmentForm):
    """Segmentation of a slide into classes given by prompts."""

    def __init__(self, napari_viewer: napari.Viewer, cache: SegmentCache | None = None) -> None:
        self._viewer = napari_viewer
        self.presenter = SegmentPresenter(napari_viewer, self)
        super().__init__(slide_choices=self.slide_layers(napari_viewer))
        self.controller = SegmentController(
            napari_viewer,
            self,
            cache if cache is not None else SegmentCache(),
            on_result=self.presenter.show_outcome,
        )
        self.controller.runner.on_partial = self.presenter.show_first_look
        self.wire(napari_viewer, self)
        self._prefetch_timer = QTimer(self.native)
        self._prefetch_timer.setSingleShot(True)
        self._prefetch_timer.setInterval(PREFETCH_MS)
        self._prefetch_timer.timeout.connect(self.controller.prefetch)
        # QTextEdit's textChanged carries no value, so magicgui's ``changed`` of the class box
        # never fires: listen to Qt's signal
        self.classes.native.textChanged.connect(self._class_list_changed)
        self.templates.changed.connect(self._class_list_changed)

    def _class_list_changed(self, _value: object = None) -> None:
        """Restart the pause after which the new classes' text is encoded."""
        self._prefetch_timer.start()
