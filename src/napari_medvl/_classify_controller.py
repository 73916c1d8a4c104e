"""The "Slide classification" dock's controller: checks the form's inputs, starts and cancels
classification jobs and shows the model's notice; no Qt layout, no layers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_medvl._classify_form import ClassifyForm
from napari_medvl._classify_job import (
    ClassifyCache,
    ClassifyOutcome,
    ClassifyRequest,
    classify_job,
)
from napari_medvl._notify import report_error

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = ["ClassifyController"]


class ClassifyController:
    """Jobs of one classification dock; ``on_result(outcome)`` receives each result on the
    GUI thread (the presenter's)."""

    def __init__(
        self,
        viewer: napari.Viewer,
        form: ClassifyForm,
        cache: ClassifyCache,
        on_result: Callable[[ClassifyOutcome], None],
    ) -> None:
        self._viewer = viewer
        self.form = form
        self.cache = cache
        self.runner: JobRunner = form.controls.bind(on_result)

    def model_changed(self, _value: Any = None) -> None:
        """The chosen model's demo notice under the status line."""
        from medvl_engine.demo_models import demo_notice_for

        self.form.controls.set_notice(demo_notice_for(self.form.model.value))

    def request(self) -> ClassifyRequest | None:
        """The request the form's inputs describe, or None (with a notification)."""
        from medvl_engine.errors import ConfigError

        layer = self.form.slide_choice.value
        classes = self.form.class_names()
        problem = None
        if layer is None:
            problem = "Open a slide and choose it here before classifying."
        elif len(classes) < 2:
            problem = "Give at least two classes, one per line, or choose an organ preset."
        if problem:
            self.form.controls.status.value = problem
            report_error(ConfigError(problem))
            return None
        chosen = self.form.features.value
        features = Path(str(chosen)) if chosen and str(chosen) not in ("", ".") else None
        slide = layer.metadata["slide"]
        return ClassifyRequest(
            slide=slide,
            model=self.form.model.value,
            classes=classes,
            tau_attn=float(self.form.tau.value) or None,
            features=features,
            store=None if features is not None else self._opened_store(slide),
        )

    def _opened_store(self, slide: Any) -> Any:
        """The feature store of a features layer opened on ``slide`` (the latest), or None."""
        stores = [
            layer.metadata.get("feature_store")
            for layer in self._viewer.layers
            if layer.metadata.get("medvl_kind") == "features"
            and layer.metadata.get("slide") is slide
        ]
        return stores[-1] if stores else None

    def run(self, _value: Any = None) -> Any:
        """Start the classification (cancelling a running one); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        return self.runner.start(classify_job, request, self.cache)
