"""The heatmap job in the model process: the child's handlers.

The child runs :func:`napari_medvl._heatmap_job.heatmap_here` on its own FeatureCache (the
models and open slides stay in the child's ``state``) and sends back the engine's
Heatmap and a StoreSummary (:mod:`._worker_results`). No Qt and no torch at import.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

from napari_medvl._heatmap_job import (
    FeatureCache,
    HeatmapRequest,
    HeatmapUpdate,
    heatmap_here,
    preload_encoder,
)
from napari_medvl._preload import wait_for_load
from napari_medvl._progress import Progress
from napari_medvl._worker_results import FinalMap, PartialMap, StoreSummary

__all__ = ["heatmap_in_child", "kept_in_child", "open_in_child", "preload_in_child"]


def _cache(state: dict[str, Any], root: Path | None) -> Any:
    caches: dict[str, Any] = state.setdefault("heatmap_caches", {})
    key = str(root)
    if key not in caches:
        # encoders are shared by every cache of the process: one model in memory
        encoders = state.setdefault("encoders", {})
        loading = state.setdefault("loading", {})
        caches[key] = FeatureCache(root=root, encoders=encoders, loading=loading)
    return caches[key]


def open_in_child(state: dict[str, Any], path: str) -> Any:
    """The child's open slide at ``path`` (opened once; closed when the process stops)."""
    from medvl_engine.io.slide import open_slide

    slides: dict[str, Any] = state.setdefault("slides", {})
    lock = state.setdefault("slides_lock", threading.Lock())
    with lock:
        if path not in slides:
            slides[path] = open_slide(path)
            state.setdefault("_on_stop", []).append(slides[path].close)
        return slides[path]


def preload_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Any, None, str]:
    """Load encoder ``payload["model"]`` (and run its text tower once); returns its name."""
    cache = _cache(state, None)
    model = payload["model"]
    thread = preload_encoder(cache, model)
    if thread is not None:
        thread.join()
    yield from wait_for_load(cache.loading, model, cancel, "model loading")
    if model not in cache.encoders:  # the load failed: load again for its error sentence
        from medvl_engine.encoders import load_encoder

        cache.encoders[model] = load_encoder(model)
    return str(model)


def heatmap_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Progress | PartialMap, None, FinalMap]:
    """The child's heatmap job: ``payload`` holds the HeatmapRequest's fields with the slide
    as its path (``slide``) and the cache folder (``root``)."""
    fields_of = dict(payload)
    root = fields_of.pop("root")
    slide = open_in_child(state, fields_of.pop("slide"))
    cache = _cache(state, root)
    steps = heatmap_here(HeatmapRequest(slide=slide, **fields_of), cache, cancel)
    summaries: dict[int, StoreSummary] = {}

    def summary(store: Any) -> StoreSummary:
        if id(store) not in summaries:
            summaries[id(store)] = StoreSummary.of(store)
        return summaries[id(store)]

    while True:
        try:
            item = next(steps)
        except StopIteration as finished:
            outcome = finished.value
            break
        if isinstance(item, HeatmapUpdate):
            shown = item.outcome
            yield PartialMap(shown.heatmap, summary(shown.store), item.done, item.total)
        else:
            yield item
    return FinalMap(
        outcome.heatmap,
        StoreSummary.of(outcome.store),
        outcome.top_patches,
        outcome.store_path,
        outcome.extracted,
    )


def kept_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Any, None, int]:
    """Patches whose features the child's caches keep from cancelled runs."""
    del payload, cancel
    caches = state.get("heatmap_caches", {}).values()
    yield from ()
    return sum(partial.done for cache in caches for partial in cache.partials.values())
