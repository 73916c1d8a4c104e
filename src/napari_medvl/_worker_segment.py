"""The segmentation job in the model process: the child's handlers.

The child runs :func:`napari_medvl._segment_job.segment_here` on its own SegmentCache (the
encoder, the feature stores, the tissue masks and the class embeddings stay in the child's
``state``; the encoders are those the heatmap and classification jobs share) and sends back
the engine's SegmentResult (and before it a run's first look of its known classes,
:class:`FirstLook`) with its store as the torch-free StoreSummary (:mod:`._worker_results`):
the class map (labels [rows, cols], probabilities [K, rows, cols], patch probabilities
[N, K]), the regions' rings and the area table, numpy only. No Qt and no torch at import.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from napari_medvl._preload import wait_for_load
from napari_medvl._progress import Progress
from napari_medvl._segment_job import (
    FirstLook,
    SegmentCache,
    SegmentRequest,
    class_embeddings,
    segment_here,
)
from napari_medvl._worker_heatmap import open_in_child
from napari_medvl._worker_results import StoreSummary

if TYPE_CHECKING:
    from medvl_engine.segmentation import SegmentResult

__all__ = ["embeddings_in_child", "portable_result", "segment_in_child"]


def _cache(state: dict[str, Any]) -> SegmentCache:
    """The child's SegmentCache, made on first use with the process's shared encoders."""
    if "segment_cache" not in state:
        state["segment_cache"] = SegmentCache(encoders=state.setdefault("encoders", {}))
    cache: SegmentCache = state["segment_cache"]
    return cache


def portable_result(result: SegmentResult) -> SegmentResult:
    """``result`` with its feature store (features [N, D], a torch tensor cached with them)
    replaced by the store's StoreSummary: what may cross the pipe to napari's process."""
    return dataclasses.replace(result, store=StoreSummary.of(result.store))


def segment_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Progress | FirstLook, None, SegmentResult]:
    """The child's segmentation job: ``payload`` holds the SegmentRequest's fields with the
    slide as its path (``slide``). A first look goes back without its request."""
    fields_of = dict(payload)
    slide = open_in_child(state, fields_of.pop("slide"))
    # a heatmap dock's preload of the same model is waited for, not loaded a second time
    yield from wait_for_load(
        state.setdefault("loading", {}), fields_of["model"], cancel, "segmentation"
    )
    steps = segment_here(SegmentRequest(slide=slide, **fields_of), _cache(state), cancel)
    while True:
        try:
            item = next(steps)
        except StopIteration as finished:
            return portable_result(finished.value.result)
        if isinstance(item, FirstLook):
            yield FirstLook(portable_result(item.result), item.pending)
        else:
            yield item


def embeddings_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Progress, None, list[str]]:
    """Encode the class embeddings of ``payload["classes"]`` (name -> names) in the ensembles
    of ``payload["templates"]`` that the child lacks (one batch of the text encoder), when
    ``payload["model"]`` is loaded here; returns the names of the classes the child holds."""
    del cancel
    yield from ()
    cache = _cache(state)
    model, templates, classes = payload["model"], payload["templates"], payload["classes"]
    encoder = cache.encoders.get(model)
    if encoder is None:  # not loaded (yet): the next run loads it and encodes these
        return []
    class_embeddings(cache, encoder, model, templates, classes)
    return list(classes)
