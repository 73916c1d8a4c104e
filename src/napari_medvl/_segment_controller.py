"""The "Segment by prompts" dock's controller: checks the form's inputs, starts and cancels
segmentation jobs (in the model process where it can, :mod:`._segment_job`) and shows the
model's notice; no Qt layout, no layers."""

from __future__ import annotations

import threading
from typing import Any

from napari_medvl._pathology_dock import PathologyController
from napari_medvl._segment_form import OVERLAPS, SegmentForm
from napari_medvl._segment_job import (
    SegmentCache,
    SegmentOutcome,
    SegmentRequest,
    prefetch_embeddings,
    segment_job,
)

__all__ = ["SegmentController"]


class SegmentController(PathologyController[SegmentCache, SegmentRequest, SegmentOutcome]):
    """Jobs of one segmentation dock; ``on_result(outcome)`` receives each result on the GUI
    thread (the presenter's)."""

    job = segment_job
    form: SegmentForm
    prefetching: threading.Thread | None = None
    """The thread encoding the class list's new text, or None."""

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
            self.refuse(problem)
            return None
        return SegmentRequest(
            slide=layer.metadata["slide"],
            model=self.form.model.value,
            classes=classes,
            templates=self.form.templates.value,
            overlap=OVERLAPS[self.form.overlap.value],
            min_confidence=float(self.form.min_confidence.value),
            features=self.form.features_path(),
        )

    def prefetch(self, _value: Any = None) -> threading.Thread | None:
        """Encode the text of the classes typed so far that the cache lacks, in a thread (in
        the model process when the model is there; the dock calls this once the class list
        has been left alone for a moment); returns the thread, or None when there is nothing
        to encode or the lines do not parse."""
        from medvl_engine.errors import MedVLError
        from medvl_engine.prompts import parse_class

        try:
            classes = dict(parse_class(line) for line in self.form.class_lines())
        except MedVLError:
            return None
        if not classes:
            return None
        self.prefetching = prefetch_embeddings(
            self.cache, self.form.model.value, self.form.templates.value, classes
        )
        return self.prefetching
