"""The segmentation job: features, class embeddings and the map, with progress, off the GUI
thread; and the recount job that follows an edit of the map.

No Qt here. The job calls :func:`medvl_engine.pathology.segment` (what ``medvl segment``
calls) with what a ``SegmentCache`` keeps because a new class list does not change it: the
encoder, the feature store of (slide, model, grid or features file), the slide's tissue mask
and each class's prompt-ensemble embedding c_k [D] (by model, templates and names). A changed
class list then costs only the text of the new classes (every template x synonym of them in
one batch of the text encoder) and the map (p = softmax_k(s * v_i . c_k) over the N patches,
the cells, the regions). While that text is encoded, a first look maps every class at once,
each new class from its first wording alone (its first name in the first template, one text).

Where it can, the job runs in the model process (:mod:`._worker_process`; the child runs
:func:`segment_here` on its own SegmentCache, :mod:`._worker_segment`): napari's process then
holds no model, features or class embeddings and never imports torch; the outcome's result is
the engine's SegmentResult (numpy only) with the torch-free StoreSummary as its ``store``.
Napari's cache then records what the child holds: LoadedElsewhere encoders and, in
``elsewhere``, the embedding keys the child has encoded. The job runs here, in threads, when
no process can be started, when the slide is not a file the child can open, or when the cache
holds a model loaded here. The recount (pure numpy) always runs here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from napari_medvl._child_jobs import LoadedElsewhere, model_process_for, relay
from napari_medvl._progress import Progress, run_with_progress

__all__ = [
    "FirstLook",
    "RecountOutcome",
    "SegmentCache",
    "SegmentOutcome",
    "SegmentRequest",
    "class_embeddings",
    "embeddings_ready",
    "first_look_embeddings",
    "format_areas",
    "prefetch_embeddings",
    "recount_job",
    "segment_here",
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
class FirstLook:
    """The map of all the run's classes shown while the prompt ensembles of the ``pending``
    classes (new to this run) are encoded: ``result`` is the engine's SegmentResult with the
    known classes' ensembles and each pending class's first wording
    (:func:`first_look_embeddings`); ``request`` the run's (None while it comes from the
    model process, which does not send the slide back)."""

    result: Any
    pending: tuple[str, ...]
    request: SegmentRequest | None = None

    @property
    def outcome(self) -> SegmentOutcome:
        assert self.request is not None
        return SegmentOutcome(self.request, self.result)


@dataclass
class SegmentCache:
    """Encoders by model name (a LoadedElsewhere where the model process holds it); feature
    stores by (slide file, model, overlap, features file); tissue masks (mask, downsample) by
    slide file; class embeddings float32 [D] by (model, templates, class name, its names),
    computed under ``text_lock`` (one text encoding at a time: a tokenizer is not safe to
    share between threads); ``elsewhere``: the embedding keys the model process ``child``
    (its pid) holds."""

    encoders: dict[str, Any] = field(default_factory=dict)
    stores: dict[tuple[str, str, int, str], Any] = field(default_factory=dict)
    tissues: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)
    embeddings: dict[tuple[str, str, str, tuple[str, ...]], Any] = field(default_factory=dict)
    text_lock: threading.Lock = field(default_factory=threading.Lock)
    elsewhere: set[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=set)
    child: int | None = None


def _store_key(request: SegmentRequest) -> tuple[str, str, int, str]:
    return (str(request.slide.path), request.model, request.overlap, str(request.features or ""))


def _embedding_keys(
    model: str, templates: str, classes: dict[str, tuple[str, ...]]
) -> dict[str, tuple[str, str, str, tuple[str, ...]]]:
    return {name: (model, templates, name, tuple(names)) for name, names in classes.items()}


def embeddings_ready(
    cache: SegmentCache, model: str, templates: str, classes: dict[str, tuple[str, ...]]
) -> bool:
    """True when every class of ``classes`` has its embedding, here or in the model process."""
    return all(
        key in cache.embeddings or key in cache.elsewhere
        for key in _embedding_keys(model, templates, classes).values()
    )


_WORKER = "napari_medvl._worker_segment"


def segment_job(
    request: SegmentRequest, cache: SegmentCache, cancel: threading.Event | None = None
) -> Generator[Progress | FirstLook, None, SegmentOutcome]:
    """Generator job: load the encoder, read or extract the features (once per slide, model
    and grid), then map the classes; in the model process where it can (module docstring).
    A run with classes whose prompt ensembles are not encoded yet first yields the
    :class:`FirstLook` of every class, the new ones from their first wording."""
    process = model_process_for(cache.encoders.get(request.model), request.slide, cancel)
    if process is None:
        return (yield from segment_here(request, cache, cancel))
    if cache.child != process.pid:  # a new model process holds no text of an earlier one
        cache.elsewhere.clear()
        cache.child = process.pid
    payload = {name: getattr(request, name) for name in SegmentRequest.__dataclass_fields__}
    payload["slide"] = str(request.slide.path)
    steps = process.run(f"{_WORKER}:segment_in_child", payload, cancel, label="segmentation")
    result = yield from relay(
        steps,
        lambda item: (
            dataclasses.replace(item, request=request) if isinstance(item, FirstLook) else item
        ),
    )
    cache.encoders.setdefault(request.model, LoadedElsewhere(request.model))
    cache.elsewhere.update(
        _embedding_keys(request.model, request.templates, request.classes).values()
    )
    return SegmentOutcome(request, result)


def segment_here(
    request: SegmentRequest, cache: SegmentCache, cancel: threading.Event | None = None
) -> Generator[Progress | FirstLook, None, SegmentOutcome]:
    """:func:`segment_job` in this process (threads): the model loads into ``cache``, and
    :func:`medvl_engine.pathology.segment` maps the classes with the cached store, tissue
    mask and class embeddings (those missing computed and kept); the first look, with the new
    classes from their first wording, comes before their prompt ensembles are encoded."""
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError

    encoder = cache.encoders.get(request.model)
    if encoder is None or isinstance(encoder, LoadedElsewhere):
        encoder = yield from run_with_progress(
            "loading model", lambda progress: load_encoder(request.model), cancel=cancel
        )
        cache.encoders[request.model] = encoder
    key = _store_key(request)
    store = cache.stores.get(key)
    extracted = store is None and request.features is None
    if store is None:
        store = yield from run_with_progress(
            "features",
            lambda progress: _features(request, encoder, progress, cancel),
            cancel=cancel,
        )
        cache.stores[key] = store
    looks = first_look_embeddings(cache, encoder, request.model, request.templates, request.classes)
    if looks is not None:
        embeddings, pending = looks
        yield FirstLook(_segment(request, encoder, store, cache, embeddings), pending, request)
    embeddings = class_embeddings(cache, encoder, request.model, request.templates, request.classes)
    result = _segment(request, encoder, store, cache, embeddings)
    result.extracted = extracted
    if cancel is not None and cancel.is_set():
        raise CancelledError("The segmentation was cancelled.")
    return SegmentOutcome(request, result)


def _segment(
    request: SegmentRequest, encoder: Any, store: Any, cache: SegmentCache, embeddings: Any
) -> Any:
    """The engine's segment() of the request's classes on its slide with the cached store and
    tissue mask and the class embeddings ``embeddings`` [K, D] (in the classes' order)."""
    from medvl_engine.pathology import segment
    from medvl_engine.tiling import tissue_mask

    slide_key = str(request.slide.path)
    if slide_key not in cache.tissues:
        cache.tissues[slide_key] = tissue_mask(request.slide)
    return segment(
        request.slide,
        request.classes,
        encoder,
        templates=request.templates,
        overlap=request.overlap,
        min_confidence=request.min_confidence,
        features=store,
        class_embeddings=embeddings,
        tissue=cache.tissues[slide_key],
    )


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
    ensembles of ``templates`` (:func:`medvl_engine.prompts.ensemble_embeddings`: every
    template x name text of the classes ``cache`` does not hold yet in one batch of the
    text encoder), keeping each class's row in ``cache``."""
    import torch

    from medvl_engine.prompts import ensemble_embeddings, resolve_templates

    keys = _embedding_keys(model, templates, classes)
    with cache.text_lock:
        missing = {
            name: names for name, names in classes.items() if keys[name] not in cache.embeddings
        }
        if missing:
            fresh = ensemble_embeddings(encoder.encode_text, missing, resolve_templates(templates))
            for name, row in zip(missing, fresh, strict=True):  # [K', D]
                cache.embeddings[keys[name]] = row
    return torch.stack([cache.embeddings[keys[name]] for name in classes])


def first_look_embeddings(
    cache: SegmentCache,
    encoder: Any,
    model: str,
    templates: str,
    classes: dict[str, tuple[str, ...]],
) -> tuple[Any, tuple[str, ...]] | None:
    """Class embeddings [K, D] for a first look, and the classes still to encode: the known
    classes' prompt ensembles from ``cache``, each new class from its first wording alone,
    c = n(E(u_1.format(s_1))) (one text per new class, in one batch; not kept). None when
    there is nothing to look at first: every class is known, or each new class's ensemble is
    its first wording (one name and no templates)."""
    import torch

    from medvl_engine.prompts import (
        check_classes,
        ensemble_embeddings,
        expand_classes,
        resolve_templates,
    )

    check_classes(classes)  # the run's own sentence for a class list it cannot map
    keys = _embedding_keys(model, templates, classes)
    resolved = resolve_templates(templates)
    with cache.text_lock:
        missing = {
            name: names for name, names in classes.items() if keys[name] not in cache.embeddings
        }
        if not any(len(texts) > 1 for texts in expand_classes(missing, resolved).values()):
            return None
        first = {name: tuple(names)[:1] for name, names in missing.items()}
        fresh = dict(
            zip(
                first,
                ensemble_embeddings(encoder.encode_text, first, resolved and resolved[:1]),
                strict=True,
            )
        )
        rows = [fresh[name] if name in fresh else cache.embeddings[keys[name]] for name in classes]
    return torch.stack(rows), tuple(missing)


def prefetch_embeddings(
    cache: SegmentCache, model: str, templates: str, classes: dict[str, tuple[str, ...]]
) -> threading.Thread | None:
    """Encode, in a thread, the classes' ensembles ``cache`` lacks while the user is still at
    the class list, so the run that follows finds them: in the model process when the model
    is loaded there (the child keeps them), else here. None when the model is not loaded
    yet (its first run loads it) or nothing is missing."""
    encoder = cache.encoders.get(model)
    if encoder is None or embeddings_ready(cache, model, templates, classes):
        return None

    def encode() -> None:
        try:
            if isinstance(encoder, LoadedElsewhere):
                from napari_medvl._worker_process import model_process

                process = model_process()
                if process is None:
                    return
                payload = {"model": model, "templates": templates, "classes": classes}
                encoded = process.call(f"{_WORKER}:embeddings_in_child", payload)
                keys = _embedding_keys(model, templates, classes)
                cache.elsewhere.update(keys[name] for name in encoded)
            else:
                class_embeddings(cache, encoder, model, templates, classes)
        except Exception:  # the run itself reports what is wrong with these classes
            return

    thread = threading.Thread(target=encode, name="medvl class text", daemon=True)
    thread.start()
    return thread


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
