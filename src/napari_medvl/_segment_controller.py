"""The "Segment by prompts" dock's controller: checks the form's inputs, starts and cancels
segmentation jobs and shows the model's notice; no Qt layout, no layers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_medvl._notify import report_error
from napari_medvl._segment_form import OVERLAPS, SegmentForm
from napari_medvl._segment_job import SegmentCache, SegmentOutcome, SegmentRequest, segment_job

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = ["SegmentController"]


class SegmentController:
    """Jobs of one segmentation dock; ``on_result(outcome)`` receives each result on the GUI
    thread (the presenter's)."""

    def __init__(
        self,
        viewer: napari.Viewer,
        form: SegmentForm,
        cache: SegmentCache,
        on_result: Callable[[SegmentOutcome], None],
    ) -> None:
        self._viewer = viewer
        self.form = form
        self.cache = cache
        self.runner: JobRunner = form.controls.bind(on_result)

    def model_changed(self, _value: Any = None) -> None:
        """The chosen model's demo notice under the status line."""
        from medvl_engine.demo_models import demo_notice_for

        self.form.controls.set_notice(demo_notice_for(self.form.model.value))

    def request(self) -> SegmentRequest | None:
        """The request the form's inputs describe, or None (with a notification)."""
        from medvl_engine.errors import ConfigError, MedVLError
        from medvl_engine.prompts import check_classes, parse_class

        layer = self.form.slide_choice.value
        try:
            if layer is None:
                raise ConfigError("Open a slide and choose it here before segmenting.")
            pairs = [parse_class(line) for line in self.form.class_lines()]
            if len({name for name, _ in pairs}) != len(pairs):
                raise ConfigError("Two lines name the same class; give each class once.")
            classes = check_classes(dict(pairs))
        except MedVLError as problem:
            self.form.controls.status.value = str(problem)
            report_error(problem)
            return None
        chosen = self.form.features.value
        features = Path(str(chosen)) if chosen and str(chosen) not in ("", ".") else None
        return SegmentRequest(
            slide=layer.metadata["slide"],
            model=self.form.model.value,
            classes=classes,
            templates=self.form.templates.value,
            overlap=OVERLAPS[self.form.overlap.value],
            min_confidence=float(self.form.min_confidence.value),
            features=features,
        )

    def run(self, _value: Any = None) -> Any:
        """Start the segmentation (cancelling a running one); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        return self.runner.start(segment_job, request, self.cache)
