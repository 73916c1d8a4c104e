"""The text-prompt heatmap job: the engine's ``prompt_heatmap`` with progress and a cache.

No Qt here. The first request for a (slide, encoder, patch grid) has the engine extract
patch features into a zarr store in the cache folder (resumable); the store and the encoder
stay loaded in a ``FeatureCache`` so a new prompt is one text encoding plus the engine's
similarity map. A request may instead name features made elsewhere (a medvl store, a
TRIDENT/CLAM ``.h5`` or a CLAM ``.pt``): the engine checks they belong to the slide.

While features are being computed the engine yields partial maps (the patches in the
viewer's view first, see :func:`medvl_engine.pathology.prompt_heatmap`); each becomes a
``HeatmapUpdate``. The engine's PartialFeatures of the slide stays in the cache, so a
cancelled job's features are kept and the next Run continues from them.

Where it can, the job runs in the model process (:mod:`._worker_process`; the child runs this
same job on its own cache, :mod:`._worker_heatmap`): napari's process then holds no model and
imports no torch, the outcome's ``heatmap`` is the engine's Heatmap (numpy only) and its
``store`` the torch-free StoreSummary. It runs here, in threads, when no process can be
started, when the slide is not a file the child can open, or when the cache holds a model
loaded here (a demo viewer's that was given model objects rather than folders).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvl_engine.common.cache import cache_dir
from napari_medvl._child_jobs import LoadedElsewhere, model_process_for, relay
from napari_medvl._preload import load_in_background, wait_for_load
from napari_medvl._progress import Progress, run_with_progress

if TYPE_CHECKING:
    from napari_medvl._worker_process import ModelProcess

__all__ = [
    "HeatmapRequest",
    "HeatmapOutcome",
    "HeatmapUpdate",
    "FeatureCache",
    "LoadedElsewhere",
    "heatmap_here",
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

    @classmethod
    def of_complete(cls, request: HeatmapRequest, done: Any) -> HeatmapOutcome:
        """The outcome of ``done``, a complete map: the engine's PromptMap, or the FinalMap the
        model process sends back (the same fields, torch-free)."""
        return cls(
            request,
            done.heatmap,
            done.top_patches,
            store=done.store,
            store_path=done.store_path,
            extracted=done.extracted,
        )


@dataclass
class HeatmapUpdate:
    """A map of the ``done`` of ``total`` patches whose features are known so far."""

    outcome: HeatmapOutcome
    done: int
    total: int


@dataclass
class FeatureCache:
    """Encoders and feature stores kept in memory while napari runs (keys: model; slide + model).

    ``partials``: the engine's PartialFeatures of slides whose features are being computed.
    """

    root: Path | None = None
    encoders: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, Any] = field(default_factory=dict)
    partials: dict[str, Any] = field(default_factory=dict)
    loading: dict[str, threading.Event] = field(default_factory=dict)

    def folder(self) -> Path:
        return self.root if self.root is not None else cache_dir("features", create=True)

    def remember(self, slide: Any, model: str, encoder: Any, store: Any) -> None:
        """Keep an encoder and a slide's feature store computed elsewhere (e.g. by the demo)."""
        self.encoders[model] = encoder
        self.stores[_store_slot(slide, encoder)] = store


def preload_encoder(cache: FeatureCache, model: str) -> threading.Thread | None:
    """Load encoder ``model`` in the background, and run its text tower once (its first call
    is several times slower), so the first Run starts at the slide: in the model process
    (``cache.encoders[model]`` is then a LoadedElsewhere), else into ``cache`` in a thread.

    Returns the thread, or None when the encoder is loaded or loading already (see
    :func:`._preload.load_in_background`).
    """

    def load() -> Any:
        from napari_medvl._worker_process import model_process

        process = model_process()  # started here, in the background, on first use
        if process is not None:
            process.call(f"{_WORKER}:preload_in_child", {"model": model})
            return LoadedElsewhere(model)
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


_WORKER = "napari_medvl._worker_heatmap"


def heatmap_job(
    request: HeatmapRequest, cache: FeatureCache, cancel: threading.Event | None = None
) -> Generator[Progress | HeatmapUpdate, None, HeatmapOutcome]:
    """Generator job: load the encoder, then the engine's prompt heatmap on the cached,
    named or extracted features, in the model process where it can (module docstring).

    Yields Progress, and a HeatmapUpdate for each partial map (see the module docstring);
    returns the complete HeatmapOutcome.
    """
    process = model_process_for(cache.encoders.get(request.model), request.slide, cancel)
    if process is not None:
        return (yield from _heatmap_in_process(process, request, cache, cancel))
    return (yield from heatmap_here(request, cache, cancel))


@dataclass
class _Kept:
    """Patches with features of a slide whose extraction runs or was cancelled."""

    done: int = 0


def _heatmap_in_process(
    process: ModelProcess,
    request: HeatmapRequest,
    cache: FeatureCache,
    cancel: threading.Event | None,
) -> Generator[Progress | HeatmapUpdate, None, HeatmapOutcome]:
    from napari_medvl._worker_results import FinalMap, PartialMap

    yield Progress("loading model")  # a model being preloaded is waited for, not loaded twice
    yield from wait_for_load(cache.loading, request.model, cancel, "heatmap")
    payload = {
        name: getattr(request, name)
        for name in HeatmapRequest.__dataclass_fields__
        if name != "slide"
    }
    payload.update(slide=str(request.slide.path), root=cache.folder())
    key = f"{_slide_token(request.slide)}|{request.model}"
    kept = cache.partials.setdefault(key, _Kept())

    def update(item: Any) -> Any:
        if isinstance(item, PartialMap):
            outcome = HeatmapOutcome(request, item.heatmap, None, store=item.store)
            return HeatmapUpdate(outcome, item.done, item.total)
        if isinstance(item, Progress) and item.stage == "features":
            kept.done = item.done
        return item

    steps = process.run(f"{_WORKER}:heatmap_in_child", payload, cancel, label="heatmap request")
    final: FinalMap = yield from relay(steps, update)
    cache.encoders.setdefault(request.model, LoadedElsewhere(request.model))
    cache.partials.pop(key, None)
    return HeatmapOutcome.of_complete(request, final)


def heatmap_here(
    request: HeatmapRequest, cache: FeatureCache, cancel: threading.Event | None = None
) -> Generator[Progress | HeatmapUpdate, None, HeatmapOutcome]:
    """:func:`heatmap_job` in this process (threads): the model loads into ``cache``."""
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError
    from medvl_engine.features import PartialFeatures
    from medvl_engine.pathology import prompt_heatmap

    yield Progress("loading model")
    yield from wait_for_load(cache.loading, request.model, cancel, "heatmap")
    encoder = cache.encoders.get(request.model)
    if encoder is None or isinstance(encoder, LoadedElsewhere):
        encoder = yield from run_with_progress(
            "loading model", lambda progress: load_encoder(request.model), cancel=cancel
        )
        cache.encoders[request.model] = encoder
    if cancel is not None and cancel.is_set():
        raise CancelledError("The heatmap request was cancelled.")

    slot = _store_slot(request.slide, encoder)
    if request.features is not None:
        slot += f"|{Path(request.features).resolve()}"
    features: Any = cache.stores.get(slot)
    partial = None
    if features is None and request.features is not None:
        yield Progress("reading features")
        features = request.features
    elif features is None:
        partial = cache.partials.get(slot)
        if partial is None:
            yield Progress("patch grid")
            # the engine's name for this (slide content, encoder, grid): shared with `medvl`
            partial = PartialFeatures.for_slide(request.slide, encoder, folder=cache.folder())
            cache.partials[slot] = partial
        else:
            partial.read_stored()
        features = partial
    else:
        yield Progress("scoring prompts")

    reports: list[tuple[int, int]] = []
    rate = _Rate(partial.done if partial is not None else 0)
    maps = prompt_heatmap(
        request.slide,
        request.prompts,
        encoder,
        mode=request.mode,
        normalize=request.normalization,
        value_range=request.value_range,
        top_n=request.top_n,
        features=features,
        features_coords=request.features_coords,
        view=request.view_level0 if request.view_level0 is not None else "tissue",
        progress=lambda done, total: reports.append((done, total)),
        cancel=cancel,
        update_interval_s=UPDATE_INTERVAL_S,
    )
    try:
        for result in maps:
            if reports:
                done, total = reports[-1]
                reports.clear()
                yield Progress("features", done, total, rate.eta(done, total))
            if not result.complete:
                outcome = HeatmapOutcome(request, result.heatmap, None, store=result.store)
                yield HeatmapUpdate(outcome, result.done, result.total)
    finally:
        maps.close()  # stops the extraction at its next batch when this job is closed
    cache.stores[slot] = result.store
    cache.partials.pop(slot, None)
    return HeatmapOutcome.of_complete(request, result)


UPDATE_INTERVAL_S = 0.5


class _Rate:
    """Patches per second since the job started, for the time left (None until measurable)."""

    def __init__(self, done: int) -> None:
        self._start = time.perf_counter()
        self._done = done

    def eta(self, done: int, total: int) -> float | None:
        elapsed = time.perf_counter() - self._start
        gained = done - self._done
        if gained <= 0 or elapsed < 0.5:
            return None
        return (total - done) * elapsed / gained
