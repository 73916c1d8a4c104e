"""The text-prompt heatmap job: engine calls in order, with progress and a feature cache.

No Qt here. The first request for a (slide, encoder, patch grid) extracts patch
features into a zarr store in the cache folder (resumable, via the engine);
the store and the encoder stay loaded in a ``FeatureCache`` so a new prompt is
one text encoding plus the engine's similarity map. A request may instead name
features made elsewhere (a medvl store, a TRIDENT/CLAM ``.h5`` or a CLAM ``.pt``):
they are checked to belong to the slide and used as they are.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from napari_medvl._cache import cache_dir
from napari_medvl._progress import Progress, run_with_progress

__all__ = [
    "HeatmapRequest",
    "HeatmapOutcome",
    "FeatureCache",
    "heatmap_job",
    "parse_prompts",
    "prompt_label",
]


def parse_prompts(text: str) -> list[str]:
    """Prompts separated by ';' or new lines, stripped, empties dropped."""
    return [part.strip() for part in text.replace("\n", ";").split(";") if part.strip()]


@dataclass(frozen=True)
class HeatmapRequest:
    """What the user asked: a slide, a model, prompts and how to score them.

    ``features`` optionally names this slide's features (a medvl store, a TRIDENT/CLAM
    ``.h5`` or a CLAM ``.pt``, whose coordinates are ``features_coords`` or found beside it).
    """

    slide: Any
    model: str
    prompts: tuple[str, ...]
    mode: str = "cosine"
    normalization: str = "none"
    top_n: int = 10
    features: Path | None = None
    features_coords: Path | None = None


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
class FeatureCache:
    """Encoders and feature stores kept in memory while napari runs (keys: model; slide + model).

    ``lock`` lets one extraction at a time write to the cache folder.
    """

    root: Path | None = None
    encoders: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def folder(self) -> Path:
        return self.root if self.root is not None else cache_dir("features")

    def remember(self, slide: Any, model: str, encoder: Any, store: Any) -> None:
        """Keep an encoder and a slide's feature store computed elsewhere (e.g. by the demo)."""
        self.encoders[model] = encoder
        self.stores[_store_slot(slide, encoder)] = store


def _slide_token(slide: Any) -> str:
    path = Path(str(slide.path))
    try:
        stat = path.stat()
        return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    except OSError:
        return str(path)


def _store_slot(slide: Any, encoder: Any) -> str:
    return f"{_slide_token(slide)}|{encoder.name}"


def heatmap_job(
    request: HeatmapRequest, cache: FeatureCache, cancel: threading.Event | None = None
) -> Generator[Progress, None, HeatmapOutcome]:
    """Generator job: load the encoder, get features (cached or extracted), score the prompts."""
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError
    from medvl_engine.features import (
        extract_features,
        open_features_for_slide,
        store_path_for,
    )
    from medvl_engine.heatmap import similarity_map, top_patches
    from medvl_engine.tiling import patch_grid

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise CancelledError("The heatmap request was cancelled.")

    yield Progress("loading model")
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
    if store is None:
        yield Progress("patch grid")
        grid = patch_grid(
            request.slide, patch_size=encoder.patch_size, target_mpp=encoder.target_mpp
        )
        check_cancel()
        # the engine's name for this (slide content, encoder, grid): shared with `medvl`
        store_path = cache.folder() / store_path_for(request.slide, encoder, grid).name

        def extract_alone(*args: Any, progress: Any) -> Any:
            # a cancelled job may still be finishing its batch on the same store
            with cache.lock:
                return extract_features(*args, progress=progress)

        store = yield from run_with_progress(
            "features", extract_alone, request.slide, encoder, grid, store_path, cancel=cancel
        )
        cache.stores[slide_model_key] = store
        extracted = True
    check_cancel()

    yield Progress("scoring prompts")
    text = encoder.encode_text(list(request.prompts))
    heatmap = similarity_map(
        store,
        text,
        mode=request.mode,
        normalize=request.normalization,
        prompt=prompt_label(request.prompts, request.mode),
    )
    top = top_patches(store, heatmap.scores, n=request.top_n) if request.top_n > 0 else None
    return HeatmapOutcome(
        request, heatmap, top, store=store, store_path=store_path, extracted=extracted
    )


def _check_embed_dim(store: Any, encoder: Any) -> None:
    from medvl_engine.errors import DataError

    if store.embed_dim != encoder.embed_dim:
        raise DataError(
            f"{store.imported_from or (store.path.name if store.path else 'The features')} holds "
            f"{store.embed_dim}-dimensional features but {encoder.name} embeds prompts in "
            f"{encoder.embed_dim}; choose the model the features were extracted with.",
            store.path,
        )


def prompt_label(prompts: tuple[str, ...] | list[str], mode: str) -> str:
    """What a heatmap shows, for layer names: 'tumor', 'tumor vs stroma' or 'tumor - stroma'."""
    if mode == "contrast" and len(prompts) >= 2:
        return f"{prompts[0]} - {prompts[1]}"
    if mode == "softmax" and len(prompts) >= 2:
        return f"{prompts[0]} vs " + ", ".join(prompts[1:])
    return prompts[0] if prompts else ""
