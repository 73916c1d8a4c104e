"""Dock widget "Slide classification": LIMIT zero-shot classes, ranked, with their attention maps.

The user picks a slide layer, a model and class prompts (typed one per line, or an organ
preset); Run scores every class (Eq. 5: the best cosine between the class embedding and the
slide embedding that class's attention pools). The ranking is listed in the dock; the
attention map of the class chosen under "show attention of" is one image layer per slide,
``attention: <slide>``, updated in place when another class or a new run is shown. Work runs
off the GUI thread; Ctrl+Enter runs.

The dock is its form (``_classify_form``), wired to its controller (``_classify_controller``:
checks the inputs, runs the job) and its presenter (``_classify_presenter``: ranking and
attention layer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_medvl._classify_controller import ClassifyController
from napari_medvl._classify_form import CUSTOM, DEFAULT_MODEL, DEFAULT_PRESET, ClassifyForm
from napari_medvl._classify_job import ClassifyCache, ClassifyOutcome, ClassifyRequest
from napari_medvl._classify_presenter import ClassifyPresenter, attention_colormap
from napari_medvl._slide_layers import SLIDE_KIND
from napari_medvl._widget_common import layers_of_kind

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = [
    "CUSTOM",
    "DEFAULT_MODEL",
    "DEFAULT_PRESET",
    "ClassifyWidget",
    "attention_colormap",
]


class ClassifyWidget(ClassifyForm):
    """Zero-shot slide classification with report-guided attention maps."""

    def __init__(self, napari_viewer: napari.Viewer, cache: ClassifyCache | None = None) -> None:
        self._viewer = napari_viewer
        self.presenter = ClassifyPresenter(napari_viewer, self)
        super().__init__(
            slide_choices=lambda: layers_of_kind(napari_viewer, SLIDE_KIND),
            class_choices=self.presenter.class_choices,
        )
        self.controller = ClassifyController(
            napari_viewer,
            self,
            cache if cache is not None else ClassifyCache(),
            on_result=self.presenter.show_outcome,
        )
        self.controls.run_button.changed.connect(self.run)
        self.shown_class.changed.connect(self.presenter.show_class)
        self.model.combo.changed.connect(self.controller.model_changed)
        self.controls.bind_run_key(self.run, self.native)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self.refresh_choices)
        self.refresh_choices()
        self.preset.value = DEFAULT_PRESET
        self.controller.model_changed()

    @property
    def cache(self) -> ClassifyCache:
        """Features and models kept between runs."""
        return self.controller.cache

    @cache.setter
    def cache(self, cache: ClassifyCache) -> None:
        self.controller.cache = cache

    @property
    def runner(self) -> JobRunner:
        """The runner of the dock's classification jobs."""
        return self.controller.runner

    @property
    def last_outcome(self) -> ClassifyOutcome | None:
        """The result shown last."""
        return self.presenter.last_outcome

    def request(self) -> ClassifyRequest | None:
        """The request the form's inputs describe, or None (with a notification)."""
        return self.controller.request()

    def run(self, _value: Any = None) -> Any:
        """Start the classification (cancelling a running one); returns the worker or None."""
        return self.controller.run()

    def layer_name(self, outcome: ClassifyOutcome | None = None) -> str:
        """Name of the slide's attention layer: ``attention: <slide file>``."""
        return self.presenter.layer_name(outcome)
