"""The text-prompt heatmap job: engine calls in order, with progress and a feature cache.

No Qt here. The first request for a (slide, encoder, patch grid) extracts patch
features into a zarr store in the cache folder (resumable, via the engine);
the store and the encoder stay loaded in a ``FeatureCache`` so a new prompt is
one text encoding plus the engine's similarity map. A request may instead name
features made elsewhere (a medvl store, a TRIDENT/CLAM ``.h5`` or a CLAM ``.pt``):
they are checked to belong to the slide and used as they are.

While features are being computed the job is progressive: it first encodes the
patches in the viewer's view (nearest the centre first, in small batches), then
lets the engine extract the rest, and yields a ``HeatmapUpdate`` (the map of the
patches known so far, on the full grid) after each step, at most every
``UPDATE_INTERVAL_S``. A cancelled job keeps its partial features in the cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvl_engine.common.cache import cache_dir
from napari_medvl._partial_features import PartialFeatures, patches_in_view
from napari_medvl._preload import load_in_background, wait_for_load
from napari_medvl._progress import Progress, run_with_progress

__all__ = [
    "HeatmapRequest",
    "HeatmapOutcome",
    "HeatmapUpdate",
    "FeatureCache",
    "heatmap_job",
    "parse_prompts",
    "preload_encoder",
]


def parse_prompts(text: str) -> list[str]:
    """Prompts separated by ';' or new lines, stripped, empties dropped."""
    return [part.strip() for part in text.replace("\n", ";").split(";") if part.strip()]


@dataclass(frozen=True)
class HeatmapRequest:
    """What the user asked: a slide, a model, prompts and how to score them.

    ``features`` optionally names this slide's features (a medvl store, a TRIDENT/CLAM
    ``.h5`` or a CLAM ``.pt``, whose coordinates are ``features_coords`` or found beside it).
    ``value_range`` (low, high) is the range of normalization "fixed"; ``view_level0``
    (x0, y0, x1, y1) level-0 px the part of the slide in view, whose patches come first.
    """

    slide: Any
    model: str
    prompts: tuple[str, ...]
    mode: str = "cosine"
    normalization: str = "none"
    top_n: int = 10
    features: Path | None = None
    features_coords: Path | None = None
    value_range: tuple[float, float] | None = None
    view_level0: tuple[float, float, float, float] | None = None


@dataclass
class HeatmapOutcome:
    """Engine results for one request: the similarity map and the top patches."""

    request: HeatmapRequest
    heatmap: Any
    top_patches: Any
    store: Any = None
    store_path: Path | None = None
    extracted: bool = False


@dataclass
class HeatmapUpdate:
    """A map of the ``done`` of ``total`` patches whose features are known so far."""

    outcome: HeatmapOutcome
    done: int
    total: int


@dataclass
class FeatureCache:
    """Encoders and feature stores kept in memory while napari runs (keys: model; slide + model).

    ``lock`` lets one extraction at a time write to the cache folder.
    """

    root: Path | None = None
    encoders: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, Any] = field(default_factory=dict)
    partials: dict[str, PartialFeatures] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    loading: dict[str, threading.Event] = field(default_factory=dict)

    def folder(self) -> Path:
        return self.root if self.root is not None else cache_dir("features", create=True)

    def remember(self, slide: Any, model: str, encoder: Any, store: Any) -> None:
        """Keep an encoder and a slide's feature store computed elsewhere (e.g. by the demo)."""
        self.encoders[model] = encoder
        self.stores[_store_slot(slide, encoder)] = store


def preload_encoder(cache: FeatureCache, model: str) -> threading.Thread | None:
    """Load encoder ``model`` into ``cache`` in a background thread, and run its text tower
    once (its first call is several times slower), so the first Run starts at the slide.

    Returns the thread, or None when the encoder is loaded or loading already (see
    :func:`._preload.load_in_background`).
    """

    def load() -> Any:
        # torch is imported here, in the background, not by the caller
        from medvl_engine.encoders import load_encoder

        encoder = load_encoder(model)
        encoder.encode_text(["tissue"])
        return encoder

    return load_in_background(cache.encoders, cache.loading, model, load)


def _slide_token(slide: Any) -> str:
    path = Path(str(slide.path))
    try:
        stat = path.stat()
        return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    except OSError:
        return str(path)


def _store_slot(slide: Any, encoder: Any) -> str:
    return f"{_slide_token(slide)}|{encoder.name}"


UPDATE_INTERVAL_S = 0.5
VISIBLE_FIRST_LIMIT = 96  # patches encoded directly before the engine extracts the rest
_FIRST_BATCH = 4  # the first overlay: a handful of patches at the centre of the view
_VISIBLE_BATCH = 32


def heatmap_job(
    request: HeatmapRequest, cache: FeatureCache, cancel: threading.Event | None = None
) -> Generator[Progress | HeatmapUpdate, None, HeatmapOutcome]:
    """Generator job: load the encoder, get features (cached or extracted), score the prompts.

    Yields Progress, and a HeatmapUpdate whenever features are being computed (see the
    module docstring); returns the complete HeatmapOutcome.
    """
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError
    from medvl_engine.features import open_features_for_slide

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise CancelledError("The heatmap request was cancelled.")

    yield Progress("loading model")
    yield from wait_for_load(cache.loading, request.model, cancel, "heatmap")
    encoder = cache.encoders.get(request.model)
    if encoder is None:
        encoder = yield from run_with_progress(
            "loading model", lambda progress: load_encoder(request.model), cancel=cancel
        )
        cache.encoders[request.model] = encoder
    check_cancel()

    slide_model_key = _store_slot(request.slide, encoder)
    if request.features is not None:
        slide_model_key += f"|{Path(request.features).resolve()}"
    store = cache.stores.get(slide_model_key)
    store_path = None
    extracted = False
    if store is None and request.features is not None:
        yield Progress("reading features")
        store = open_features_for_slide(
            request.features, request.slide, coords_path=request.features_coords
        )
        _check_embed_dim(store, encoder)
        cache.stores[slide_model_key] = store
        store_path = store.path
    text = None
    if store is None:
        text = encoder.encode_text(list(request.prompts))
        store, store_path, extracted = yield from _progressive_features(
            request, cache, encoder, text, slide_model_key, cancel
        )
    check_cancel()

    yield Progress("scoring prompts")
    if text is None:
        text = encoder.encode_text(list(request.prompts))
    heatmap = _score(request, store, text)
    top = top_patches_of(store, heatmap, request.top_n)
    return HeatmapOutcome(
        request, heatmap, top, store=store, store_path=store_path, extracted=extracted
    )


def _score(request: HeatmapRequest, store: Any, text: Any, known: Any = None) -> Any:
    from medvl_engine.heatmap import similarity_map
    from medvl_engine.prompts import prompt_label

    return similarity_map(
        store,
        text,
        mode=request.mode,
        normalize=request.normalization,
        value_range=request.value_range,
        prompt=prompt_label(request.prompts, request.mode),
        known=known,
    )


def top_patches_of(store: Any, heatmap: Any, n: int) -> Any:
    """The engine's top ``n`` patches of a heatmap, or None for n = 0."""
    from medvl_engine.heatmap import top_patches

    return top_patches(store, heatmap.scores, n=n) if n > 0 else None


def _progressive_features(
    request: HeatmapRequest,
    cache: FeatureCache,
    encoder: Any,
    text: Any,
    slot: str,
    cancel: threading.Event | None,
) -> Generator[Progress | HeatmapUpdate, None, tuple[Any, Path, bool]]:
    """Features for a slide without a loaded store: visible patches first, then the engine's
    extraction of the whole grid into the cache store; yields maps of the known patches."""
    from medvl_engine.errors import CancelledError
    from medvl_engine.features import extract_features, store_path_for
    from medvl_engine.tiling import patch_grid

    partial = cache.partials.get(slot)
    if partial is None:
        yield Progress("patch grid")
        grid = patch_grid(
            request.slide, patch_size=encoder.patch_size, target_mpp=encoder.target_mpp
        )
        # the engine's name for this (slide content, encoder, grid): shared with `medvl`
        store_path = cache.folder() / store_path_for(request.slide, encoder, grid).name
        partial = PartialFeatures.start(request.slide, encoder, grid, store_path)
        cache.partials[slot] = partial
    else:
        partial.read_stored()
    rate = _Rate(partial.done)

    def update() -> HeatmapUpdate:
        heatmap = _score(request, partial.store, text, known=partial.known)
        outcome = HeatmapOutcome(request, heatmap, None, store=partial.store)
        return HeatmapUpdate(outcome, partial.done, partial.total)

    def progress() -> Progress:
        return Progress("features", partial.done, partial.total, rate.eta(partial))

    visible = patches_in_view(
        partial.grid.coords,
        int(partial.grid.patch_size_level0),
        request.view_level0,
        VISIBLE_FIRST_LIMIT,
    )
    visible = visible[~partial.known[visible]]
    batch = _FIRST_BATCH
    while visible.size:
        if cancel is not None and cancel.is_set():
            raise CancelledError("The heatmap request was cancelled.")
        partial.encode(request.slide, encoder, visible[:batch])
        visible, batch = visible[batch:], _VISIBLE_BATCH
        yield progress()
        yield update()

    def extract_alone(*args: Any, progress: Any) -> Any:
        # a cancelled job may still be finishing its batch on the same store
        with cache.lock:
            return extract_features(*args, progress=progress, replace_mismatch=True)

    last_update = time.perf_counter()
    steps = run_with_progress(
        "features",
        extract_alone,
        request.slide,
        encoder,
        partial.grid,
        partial.store_path,
        cancel=cancel,
    )
    try:
        while True:
            try:
                next(steps)
            except StopIteration as finished:
                store = finished.value
                break
            if partial.read_stored() or time.perf_counter() - last_update >= UPDATE_INTERVAL_S:
                yield progress()
            if time.perf_counter() - last_update >= UPDATE_INTERVAL_S and not partial.complete:
                last_update = time.perf_counter()
                yield update()
    finally:
        steps.close()  # stops the extraction at its next batch when this job is closed
    cache.stores[slot] = store
    cache.partials.pop(slot, None)
    return store, partial.store_path, True


class _Rate:
    """Patches per second since the job started, for the time left (None until measurable)."""

    def __init__(self, done: int) -> None:
        self._start = time.perf_counter()
        self._done = done

    def eta(self, partial: PartialFeatures) -> float | None:
        elapsed = time.perf_counter() - self._start
        gained = partial.done - self._done
        if gained <= 0 or elapsed < 0.5:
            return None
        return (partial.total - partial.done) * elapsed / gained


def _check_embed_dim(store: Any, encoder: Any) -> None:
    from medvl_engine.errors import DataError

    if store.embed_dim != encoder.embed_dim:
        raise DataError(
            f"{store.imported_from or (store.path.name if store.path else 'The features')} holds "
            f"{store.embed_dim}-dimensional features but {encoder.name} embeds prompts in "
            f"{encoder.embed_dim}; choose the model the features were extracted with.",
            store.path,
        )
