"""Dock widget "Slide classification": LIMIT zero-shot classes, ranked, with their attention maps.

The user picks a slide layer, a model and class prompts (typed one per line, or an organ
preset); Run scores every class (Eq. 5: the best cosine between the class embedding and the
slide embedding that class's attention pools). The ranking is listed in the dock; the
attention map of the class chosen under "show attention of" is one image layer per slide,
``attention: <slide>``, updated in place when another class or a new run is shown. Work runs
off the GUI thread; Ctrl+Enter runs.

The dock is its form (``_classify_form``), wired to its controller (``_classify_controller``:
checks the inputs, runs the job) and its presenter (``_classify_presenter``: ranking and
attention layer) as every prompt-scoring slide dock is (``_pathology_dock``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from napari_medvl._classify_controller import ClassifyController
from napari_medvl._classify_form import CUSTOM, DEFAULT_MODEL, DEFAULT_PRESET, ClassifyForm
from napari_medvl._classify_job import ClassifyCache, ClassifyOutcome, ClassifyRequest
from napari_medvl._classify_presenter import ClassifyPresenter, attention_colormap
from napari_medvl._pathology_dock import PathologyDock

if TYPE_CHECKING:
    import napari

__all__ = [
    "CUSTOM",
    "DEFAULT_MODEL",
    "DEFAULT_PRESET",
    "ClassifyWidget",
    "attention_colormap",
]


class ClassifyWidget(PathologyDock[ClassifyCache, ClassifyRequest, ClassifyOutcome], ClassifyForm):
    """Zero-shot slide classification with report-guided attention maps."""

    def __init__(self, napari_viewer: napari.Viewer, cache: ClassifyCache | None = None) -> None:
        self._viewer = napari_viewer
        self.presenter = ClassifyPresenter(napari_viewer, self)
        super().__init__(
            slide_choices=self.slide_layers(napari_viewer),
            class_choices=self.presenter.class_choices,
        )
        self.controller = ClassifyController(
            napari_viewer,
            self,
            cache if cache is not None else ClassifyCache(),
            on_result=self.presenter.show_outcome,
        )
        self.shown_class.changed.connect(self.presenter.show_class)
        self.wire(napari_viewer, self)
