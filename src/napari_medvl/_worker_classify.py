"""The slide classification job in the model process: the child's handler.

As for heatmaps (:mod:`._worker_heatmap`), the child runs
:func:`napari_medvl._classify_job.classify_here` on its own cache and sends back the
classification's numbers, every class's attention map and the store's summary
(:mod:`._worker_results`). No Qt and no torch at import.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

from napari_medvl._classify_job import ClassifyCache, ClassifyRequest, classify_here
from napari_medvl._progress import Progress
from napari_medvl._worker_heatmap import open_in_child
from napari_medvl._worker_results import Classified, ClassScores, StoreSummary

__all__ = ["classify_in_child"]


def classify_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Progress, None, Classified]:
    """The child's classification job: ``payload`` holds the ClassifyRequest's fields with the
    slide as its path (``slide``) and the store folder (``root``)."""
    fields_of = dict(payload)
    root = fields_of.pop("root")
    slide = open_in_child(state, fields_of.pop("slide"))
    caches: dict[str, Any] = state.setdefault("classify_caches", {})
    if str(root) not in caches:
        caches[str(root)] = ClassifyCache(root=root, encoders=state.setdefault("encoders", {}))
    outcome = yield from classify_here(
        ClassifyRequest(slide=slide, **fields_of), caches[str(root)], cancel
    )
    return Classified(
        ClassScores.of(outcome.classification),
        dict(outcome.heatmaps),
        StoreSummary.of(outcome.store),
    )
