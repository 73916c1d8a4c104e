"""The slide classification job: the engine's ``classify`` with progress, and attention maps.

No Qt here; runs inside a thread worker, and in the model process where it can
(:mod:`._worker_classify`). :func:`medvl_engine.pathology.classify` (the call
``medvl classify`` makes) takes the features from the engine's cache or a features file the
user names; the encoder and stores stay loaded in a ``ClassifyCache``. Every class's attention
map is built here, so choosing another class in the dock only swaps arrays.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_medvl._child_jobs import model_process_for, relay
from napari_medvl._progress import Progress, run_with_progress

if TYPE_CHECKING:
    from napari_medvl._worker_process import ModelProcess

__all__ = [
    "ClassifyCache",
    "ClassifyOutcome",
    "ClassifyRequest",
    "classify_here",
    "classify_job",
    "format_ranking",
]


@dataclass(frozen=True)
class ClassifyRequest:
    """A slide (engine Slide), a model, class prompts (>= 2), tau_attn (None: the model's)."""

    slide: Any
    model: str
    classes: tuple[str, ...]
    tau_attn: float | None = None
    features: Path | None = None
    store: Any = None
    """An opened feature store of this slide (from a features layer); used as it is."""


@dataclass
class ClassifyOutcome:
    """The engine's SlideClassification, one attention Heatmap per class, and the store."""

    request: ClassifyRequest
    classification: Any
    heatmaps: dict[str, Any]
    store: Any


@dataclass
class ClassifyCache:
    """Encoders by model and feature stores by (slide path, model, features file).

    ``root``: folder for extracted stores; None means the engine's cache, where ``medvl
    classify`` finds them too.
    """

    root: Path | None = None
    encoders: dict[str, Any] = field(default_factory=dict)
    stores: dict[tuple[str, str, str], Any] = field(default_factory=dict)


def classify_job(
    request: ClassifyRequest, cache: ClassifyCache, cancel: threading.Event | None = None
) -> Generator[Progress, None, ClassifyOutcome]:
    """Generator job: load the encoder, get the slide's features, score classes, build maps;
    in the model process where it can (see :mod:`._heatmap_job`: the outcome's
    classification and store are then the torch-free ClassScores and StoreSummary, its maps the
    engine's Heatmaps, numpy only)."""
    process = _process_for(request, cache, cancel)
    if process is None:
        return (yield from classify_here(request, cache, cancel))
    from napari_medvl._worker_results import Classified

    payload = {
        name: getattr(request, name)
        for name in ClassifyRequest.__dataclass_fields__
        if name not in ("slide", "store")
    }
    if request.store is not None:  # a features layer's store: the child opens its file
        payload["features"] = request.store.path
    payload.update(slide=str(request.slide.path), root=cache.root)
    steps = process.run(_HANDLER, payload, cancel, label="classification")
    done: Classified = yield from relay(steps)
    return ClassifyOutcome(request, done.classification, done.heatmaps, done.store)


_HANDLER = "napari_medvl._worker_classify:classify_in_child"


def _process_for(
    request: ClassifyRequest, cache: ClassifyCache, cancel: threading.Event | None
) -> ModelProcess | None:
    """The model process, or None to classify here: a model loaded here, a slide that is no
    file, or a store that is not on disk."""
    if request.store is not None and getattr(request.store, "path", None) is None:
        return None
    return model_process_for(cache.encoders.get(request.model), request.slide, cancel)


def classify_here(
    request: ClassifyRequest, cache: ClassifyCache, cancel: threading.Event | None = None
) -> Generator[Progress, None, ClassifyOutcome]:
    """:func:`classify_job` in this process (threads): the model loads into ``cache``."""
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError, ConfigError
    from medvl_engine.pathology import classify
    from medvl_engine.slide_classification import model_tau_attn

    if len(request.classes) < 2:
        raise ConfigError("Give at least two classes, one per line, to choose between.")
    encoder = cache.encoders.get(request.model)
    if encoder is None:
        encoder = yield from run_with_progress(
            "loading model", lambda progress: load_encoder(request.model), cancel=cancel
        )
        cache.encoders[request.model] = encoder
    key = (str(request.slide.path), request.model, str(request.features or ""))
    store = request.store if request.store is not None else cache.stores.get(key)
    tau = request.tau_attn if request.tau_attn is not None else model_tau_attn(request.model)

    def run(features: Any, progress: Any = None) -> Any:
        return classify(
            request.slide,
            list(request.classes),
            encoder,
            tau_attn=tau,
            features=features,
            store_path=_store_path(cache, request, encoder),
            progress=progress,
            cancel=cancel,
        )

    if store is not None or request.features is not None:
        if store is None:
            yield Progress("reading features")
        else:
            yield Progress("scoring classes")
        result = run(store if store is not None else request.features)
    else:
        result = yield from run_with_progress(
            "features", lambda progress: run(None, progress), cancel=cancel
        )
    cache.stores[key] = result.store
    if cancel is not None and cancel.is_set():
        raise CancelledError("The classification was cancelled.")
    yield Progress("scoring classes")
    return ClassifyOutcome(request, result.classification, result.attention_maps(), result.store)


def _store_path(cache: ClassifyCache, request: ClassifyRequest, encoder: Any) -> Path | None:
    if cache.root is None:
        return None
    return Path(cache.root) / f"{Path(str(request.slide.path)).stem}-{encoder.name}.zarr"


def format_ranking(classification: Any) -> str:
    """One line per class, best first: ``1. tumor  0.9123`` (Eq. 5 picks line 1)."""
    ranked = classification.ranked
    width = max(len(name) for name, _ in ranked)
    return "\n".join(
        f"{rank}. {name:<{width}}  {score:.4f}" for rank, (name, score) in enumerate(ranked, 1)
    )
