"""The segmentation job: features, class embeddings and the map, with progress, off the GUI
thread; and the recount job that follows an edit of the map.

No Qt here. The job does what :func:`medvl_engine.pathology.segment` (``medvl segment``) does,
from the same public pieces, keeping in a ``SegmentCache`` what a new class list does not
change: the encoder, the feature store of (slide, model, grid or features file), the slide's
tissue mask and each class's prompt-ensemble embedding c_k [D] (by model, templates and
names). A changed class list then costs only the text of the new classes and the map
(``segment_store``: p = softmax_k(s * v_i . c_k) over the N patches, the cells, the regions).
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from napari_medvl._progress import Progress, run_with_progress

__all__ = [
    "RecountOutcome",
    "SegmentCache",
    "SegmentOutcome",
    "SegmentRequest",
    "class_embeddings",
    "format_areas",
    "prefetch_embeddings",
    "recount_job",
    "segment_job",
]


@dataclass(frozen=True)
class SegmentRequest:
    """A slide (engine Slide), a model, classes (name -> names, >= 2), the templates ("conch"
    or "none"), the grid overlap (1, 2, 4), the confidence below which a cell is uncertain."""

    slide: Any
    model: str
    classes: dict[str, tuple[str, ...]]
    templates: str = "conch"
    overlap: int = 1
    min_confidence: float = 0.5
    features: Path | None = None


@dataclass
class SegmentOutcome:
    """The request and the engine's SegmentResult."""

    request: SegmentRequest
    result: Any


@dataclass
class SegmentCache:
    """Encoders by model name; feature stores by (slide file, model, overlap, features file);
    tissue masks (mask, downsample) by slide file; class embeddings float32 [D] by (model,
    templates, class name, its names), computed under ``text_lock`` (one text encoding at a
    time: a tokenizer is not safe to share between threads)."""

    encoders: dict[str, Any] = field(default_factory=dict)
    stores: dict[tuple[str, str, int, str], Any] = field(default_factory=dict)
    tissues: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)
    embeddings: dict[tuple[str, str, str, tuple[str, ...]], Any] = field(default_factory=dict)
    text_lock: threading.Lock = field(default_factory=threading.Lock)


def _store_key(request: SegmentRequest) -> tuple[str, str, int, str]:
    return (str(request.slide.path), request.model, request.overlap, str(request.features or ""))


def segment_job(
    request: SegmentRequest, cache: SegmentCache, cancel: threading.Event | None = None
) -> Generator[Progress, None, SegmentOutcome]:
    """Generator job: load the encoder, read or extract the features (once per slide, model
    and grid), then map the classes."""
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError

    encoder = cache.encoders.get(request.model)
    if encoder is None:
        encoder = yield from run_with_progress(
            "loading model", lambda progress: load_encoder(request.model), cancel=cancel
        )
        cache.encoders[request.model] = encoder
    key = _store_key(request)
    store = cache.stores.get(key)
    if store is None:
        store = yield from run_with_progress(
            "features",
            lambda progress: _features(request, encoder, progress, cancel),
            cancel=cancel,
        )
        cache.stores[key] = store
        extracted = request.features is None
    else:
        extracted = False
    result = _segment(request, encoder, store, cache)
    result.extracted = extracted
    if cancel is not None and cancel.is_set():
        raise CancelledError("The segmentation was cancelled.")
    return SegmentOutcome(request, result)


def _features(
    request: SegmentRequest, encoder: Any, progress: Any, cancel: threading.Event | None
) -> Any:
    """The features file (checked against the slide and the encoder) or the slide's features
    on the request's grid (patches every 1/overlap of their side), from the engine's cache
    when it holds them."""
    from medvl_engine.errors import ConfigError
    from medvl_engine.features import open_features_for_slide, slide_features
    from medvl_engine.pathology import check_features_fit

    if request.features is not None:
        if request.overlap != 1:
            raise ConfigError(
                "A features file brings its own patch grid; leave the grid at one patch grid, "
                "or drop the features to extract an overlapping grid."
            )
        store = open_features_for_slide(request.features, request.slide)
        check_features_fit(store, encoder, request.features)
        return store
    return slide_features(
        request.slide,
        encoder,
        None,
        stride=max(1, encoder.patch_size // request.overlap),
        progress=progress,
        cancel=cancel,
    )


def class_embeddings(
    cache: SegmentCache,
    encoder: Any,
    model: str,
    templates: str,
    classes: dict[str, tuple[str, ...]],
) -> Any:
    """Class embeddings c_k float32 [K, D] of ``classes`` (name -> names) in the prompt
    ensembles of ``templates`` (:func:`medvl_engine.prompts.ensemble_embeddings`), encoding
    only the classes ``cache`` does not hold yet."""
    import torch

    from medvl_engine.prompts import ensemble_embeddings, resolve_templates

    keys = {name: (model, templates, name, tuple(names)) for name, names in classes.items()}
    with cache.text_lock:
        missing = {
            name: names for name, names in classes.items() if keys[name] not in cache.embeddings
        }
        if missing:
            fresh = ensemble_embeddings(encoder.encode_text, missing, resolve_templates(templates))
            for name, row in zip(missing, fresh, strict=True):  # [K', D]
                cache.embeddings[keys[name]] = row
    return torch.stack([cache.embeddings[keys[name]] for name in classes])


def prefetch_embeddings(
    cache: SegmentCache, model: str, templates: str, classes: dict[str, tuple[str, ...]]
) -> threading.Thread | None:
    """Encode, in a thread, the classes' ensembles ``cache`` lacks while the user is still at
    the class list, so the run that follows finds them; None when the model is not loaded
    yet (its first run loads it) or nothing is missing."""
    encoder = cache.encoders.get(model)
    if encoder is None or all(
        (model, templates, name, tuple(names)) in cache.embeddings
        for name, names in classes.items()
    ):
        return None

    def encode() -> None:
        try:
            class_embeddings(cache, encoder, model, templates, classes)
        except Exception:  # the run itself reports what is wrong with these classes
            return

    thread = threading.Thread(target=encode, name="medvl class text", daemon=True)
    thread.start()
    return thread


def _segment(request: SegmentRequest, encoder: Any, store: Any, cache: SegmentCache) -> Any:
    """``segment_store`` with the cached tissue mask and class embeddings (computing those
    missing), with ``segment``'s defaults for the logit scale, minimum area and smoothing."""
    from medvl_engine.prompts import resolve_templates
    from medvl_engine.segmentation import model_logit_scale, segment_store
    from medvl_engine.tiling import tissue_mask

    embeddings = class_embeddings(
        cache, encoder, request.model, request.templates, request.classes
    )  # [K, D]
    slide_key = str(request.slide.path)
    tissue = cache.tissues.get(slide_key)
    if tissue is None:
        tissue = cache.tissues[slide_key] = tissue_mask(request.slide)
    width, height = request.slide.dimensions
    return segment_store(
        store,
        request.classes,
        embeddings,
        tissue=tissue,
        logit_scale=model_logit_scale(encoder),
        min_confidence=request.min_confidence,
        slide_dimensions=(int(width), int(height)),
        model=encoder.name,
        templates=resolve_templates(request.templates),
    )


@dataclass
class RecountOutcome:
    """The result recounted from an edited map (``_segment_layers.recount``) and the edit's
    sequence number (a later edit's recount supersedes it)."""

    result: Any
    edit: int


def recount_job(
    result: Any, labels: np.ndarray, edit: int, cancel: threading.Event | None = None
) -> Generator[Progress, None, RecountOutcome]:
    """Generator job: regions and areas of ``result`` with the edited ``labels`` (a copy)."""
    from napari_medvl._segment_layers import recount

    yield from ()  # a generator job, as the runner takes, with nothing to report
    return RecountOutcome(recount(result, labels), edit)


def format_areas(table: list[dict[str, Any]]) -> str:
    """One line per class: ``tumor  12.3%  0.153 mm^2  (2 regions)``."""
    width = max((len(str(row["class"])) for row in table), default=0)
    lines = []
    for row in table:
        if row["area_um2"] is not None:
            area = f"{row['area_um2'] / 1e6:.3f} mm^2"
        else:
            area = f"{row['area_px2']:,.0f} px^2"
        lines.append(
            f"{row['class']:<{width}}  {100 * row['share_of_tissue']:5.1f}%  {area}  "
            f"({row['regions']} regions)"
        )
    return "\n".join(lines)
