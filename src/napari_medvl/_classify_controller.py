"""The "Slide classification" dock's controller: checks the form's inputs, starts and cancels
classification jobs and shows the model's notice; no Qt layout, no layers."""

from __future__ import annotations

from typing import Any

from napari_medvl._classify_form import ClassifyForm
from napari_medvl._classify_job import (
    ClassifyCache,
    ClassifyOutcome,
    ClassifyRequest,
    classify_job,
)
from napari_medvl._pathology_dock import PathologyController

__all__ = ["ClassifyController"]


class ClassifyController(PathologyController[ClassifyCache, ClassifyRequest, ClassifyOutcome]):
    """Jobs of one classification dock; ``on_result(outcome)`` receives each result on the
    GUI thread (the presenter's)."""

    job = classify_job
    form: ClassifyForm

    def request(self) -> ClassifyRequest | None:
        """The request the form's inputs describe, or None (with a notification)."""
        from medvl_engine.errors import ConfigError

        layer = self.form.slide_choice.value
        classes = self.form.class_names()
        if layer is None:
            self.refuse(ConfigError("Open a slide and choose it here before classifying."))
            return None
        if len(classes) < 2:
            self.refuse(
                ConfigError("Give at least two classes, one per line, or choose an organ preset.")
            )
            return None
        features = self.form.features_path()
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
