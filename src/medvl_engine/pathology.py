"""One engine call per pathology action: a prompt heatmap, a zero-shot class, a tissue map.

``medvl heatmap`` / ``medvl classify`` / ``medvl segment``, the viewer's docks and the demo
all call these functions; they differ only in what they do with the results. Every prompt
may be a prompt ensemble (names x templates, :mod:`medvl_engine.prompts`): on by default
("conch") for classify and segment, off ("none") for heatmaps.

Prompt heatmap (:func:`prompt_heatmap`). Patch features v_i [N, D] (L2-normalised, one per
patch of the slide's tissue grid) come from a feature store: given, cached, or extracted now.
Prompt embeddings t_k [T, D] come from the model's text tower; each patch scores
    cosine    s_i = cos(v_i, c) = v_i . t_0                     (LIMIT's per-patch heatmap)
    softmax   s_i = softmax_k(v_i . t_k / T)[0]                 (first class among the prompts)
    contrast  s_i = v_i . t_0 - v_i . t_1                       (prompt A minus prompt B)
(:mod:`medvl_engine.prompts` says which prompts each mode takes, :mod:`medvl_engine.heatmap`
computes the scores and places them on the grid.) While features are being computed the call
yields partial maps of the patches known so far, on the complete map's grid.

Slide classification (:func:`classify`), LIMIT Eq. 1-2 and 5: each class embedding c_k [D]
queries the patches, h_W(c_k) = sum_i softmax_i(v_i . c_k / tau_attn) v_i, the class score is
cos(h_W(c_k), c_k) and y = argmax_k (see :mod:`medvl_engine.slide_classification`).

Segmentation (:func:`segment`): K class ensembles c_k, p_ik = softmax_k(s v_i . c_k) with
the model's logit scale s, averaged per cell of the (optionally overlapping) patch grid, the
tissue mask applied, low-confidence cells "uncertain", then polygons and an area table
(:mod:`medvl_engine.segmentation`).

Nothing here imports torch at module import: ``medvl`` checks its inputs first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from medvl_engine.errors import DataError
from medvl_engine.prompts import (
    DEFAULT_TEMPLATES,
    check_classes,
    check_prompts,
    ensemble_embeddings,
    expand_classes,
    prompt_label,
    resolve_templates,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from medvl_engine.encoders import PatchTextEncoder
    from medvl_engine.features import FeatureStore, PartialFeatures
    from medvl_engine.heatmap import Heatmap
    from medvl_engine.segmentation import SegmentResult
    from medvl_engine.slide_classification import SlideClassification
    from medvl_engine.tiling import SlideLike

__all__ = [
    "ClassifyResult",
    "PromptMap",
    "check_features_fit",
    "classify",
    "final",
    "prompt_heatmap",
    "segment",
]
Templates = str | Path | Sequence[str] | None

ProgressCallback = Callable[[int, int], None]
Cancel = threading.Event | Callable[[], bool] | None
T = TypeVar("T")


@dataclass
class PromptMap:
    """One map of :func:`prompt_heatmap`: partial while features are computed, then complete.

    ``heatmap``: the scores s_i float32 [N] (NaN for patches not known yet) in store order,
    the grid [rows, cols] and its world transform (``scale``/``translate`` (y, x), ``units``
    "um" or "px"), the map's label (``prompt``), mode and display range. ``store``: the
    features it was scored from, whose ``coords`` [N, 2] are (x, y) level-0 px top-left (a
    partial map's store is the one still being filled in: copy what must not change).
    ``known`` bool [N]: the patches scored. ``model``: the encoder that encoded the prompts.
    ``top_patches``: on the complete map with ``top_n`` > 0, boxes int64 [n, 4] (x0, y0, x1,
    y1) level-0 px and their scores [n], best first; else None. ``store_path``: the store the
    features were read from or written to; ``extracted``: features were computed by this call.
    """

    heatmap: Heatmap
    store: FeatureStore
    known: np.ndarray
    model: str
    complete: bool
    top_patches: tuple[np.ndarray, np.ndarray] | None = None
    store_path: Path | None = None
    extracted: bool = False

    @property
    def done(self) -> int:
        """Patches scored so far."""
        return int(self.known.sum())

    @property
    def total(self) -> int:
        """Patches of the slide's grid."""
        return int(self.known.size)

    @property
    def scores(self) -> np.ndarray:
        """float32 [N], store order (NaN: not known yet)."""
        return self.heatmap.scores

    @property
    def coords(self) -> np.ndarray:
        """int64 [N, 2] (x, y) level-0 px top-left of each patch."""
        coords: np.ndarray = self.store.coords
        return coords

    @property
    def label(self) -> str:
        """The map's name: "tumor", "tumor vs stroma, fat" or "tumor - stroma"."""
        return self.heatmap.prompt


def prompt_heatmap(
    slide: SlideLike | str | Path,
    prompts: str | Sequence[str],
    model: str | PatchTextEncoder,
    *,
    mode: str = "cosine",
    normalize: str = "none",
    temperature: float = 0.01,
    value_range: tuple[float, float] | None = None,
    smooth_sigma: float = 0.0,
    top_n: int = 0,
    templates: Templates = "none",
    features: FeatureStore | PartialFeatures | str | Path | None = None,
    features_coords: str | Path | None = None,
    patch_size_level0: int | None = None,
    store_path: str | Path | None = None,
    view: tuple[float, float, float, float] | Literal["tissue"] | None = None,
    partials: bool = True,
    progress: ProgressCallback | None = None,
    cancel: Cancel = None,
    device: str = "cpu",
    update_interval_s: float = 0.5,
) -> Generator[PromptMap, None, None]:
    """Score ``prompts`` on ``slide``: yields partial PromptMaps, the last one complete.

    ``slide``: an open slide (kept open) or its path (opened and closed here). ``model``: a
    registry name, folder or HF id (loaded on ``device`` after ``features`` is checked, so a
    bad file is refused before any model loads) or a loaded encoder. ``prompts`` are checked
    for ``mode`` (ConfigError); ``normalize``, ``temperature``, ``value_range`` and
    ``smooth_sigma`` as :func:`medvl_engine.heatmap.similarity_map` takes them.
    ``templates``: "none" (each prompt as it is), "conch", a templates file or a list: each
    prompt is then the ensemble of its templated forms (:mod:`medvl_engine.prompts`).

    ``features``: a FeatureStore (used as it is); a medvl store, TRIDENT/CLAM ``.h5`` or CLAM
    ``.pt`` of this slide (``features_coords``, ``patch_size_level0`` as
    :func:`~medvl_engine.features.open_features_for_slide` takes them); a PartialFeatures
    being filled in (continued); or None: extracted into ``store_path`` (None: the cache,
    where a second call finds them). Its width must be the encoder's (DataError).

    Features being computed give partial maps (``partials``; False: only the complete map,
    extracted in this thread): with ``view`` (x0, y0, x1, y1) level-0 px, or "tissue" for the
    tissue centre, the patches there first (one map after each small batch), then the rest in
    a background thread (the first map ``update_interval_s`` after it starts, then ever more
    apart: :meth:`PartialFeatures.fill`). ``progress(done, total)``
    reports patches with features; ``cancel`` (an Event or a callable) raises CancelledError
    at the next batch. The last map is complete and has ``top_n`` top patches.
    """
    from medvl_engine.io.slide import open_slide

    prompt_list = [prompts] if isinstance(prompts, str) else list(prompts)
    check_prompts(prompt_list, mode)
    template_list = resolve_templates(templates)
    opened = None if not isinstance(slide, str | Path) else open_slide(slide)
    source = opened if opened is not None else slide
    try:
        store, partial, encoder = _features_and_encoder(
            source, model, features, features_coords, patch_size_level0, device
        )
        if template_list is None:
            text = encoder.encode_text(prompt_list)  # [T, D]
        else:
            ensembles = {prompt: (prompt,) for prompt in prompt_list}
            text = ensemble_embeddings(encoder.encode_text, ensembles, template_list)  # [T, D]

        def scored(on: Any, known: np.ndarray | None = None) -> Heatmap:
            from medvl_engine.heatmap import similarity_map

            heatmap = similarity_map(
                on,
                text,
                mode=mode,
                normalize=normalize,
                temperature=temperature,
                value_range=value_range,
                smooth_sigma=smooth_sigma,
                prompt=prompt_label(prompt_list, mode),
                known=known,
            )
            # imported .h5/.pt features name no model: the map names the one that scored it
            heatmap.metadata["encoder"] = encoder.name
            return heatmap

        extracted = store is None
        if store is None and partial is None and (partials or view is not None):
            from medvl_engine.features import PartialFeatures

            partial = PartialFeatures.for_slide(source, encoder, store_path=store_path)
        if partial is not None:
            extracted = True
            steps = partial.fill(
                source,
                encoder,
                view,
                progress=progress,
                cancel=cancel,
                interval_s=update_interval_s,
            )
            try:
                while True:
                    try:
                        next(steps)
                    except StopIteration as finished:
                        store = finished.value
                        break
                    known = partial.known.copy()
                    yield PromptMap(
                        scored(partial.store, known), partial.store, known, encoder.name, False
                    )
            finally:
                steps.close()
        elif store is None:
            from medvl_engine.features import slide_features

            store = slide_features(source, encoder, store_path, progress=progress, cancel=cancel)
        assert store is not None
        yield _complete(store, scored(store), encoder.name, top_n, extracted)
    finally:
        if opened is not None:
            opened.close()


def _complete(
    store: FeatureStore, heatmap: Heatmap, model: str, top_n: int, extracted: bool
) -> PromptMap:
    import numpy as np

    from medvl_engine.heatmap import top_patches

    top = top_patches(store, heatmap.scores, n=top_n) if top_n > 0 else None
    known = np.ones(store.n_patches, dtype=bool)
    return PromptMap(heatmap, store, known, model, True, top, store.path, extracted)


def final(maps: Iterable[T]) -> T:
    """The last item of ``maps`` (the complete map of a :func:`prompt_heatmap` run), keeping
    no earlier one in memory."""
    from collections import deque

    last = deque(maps, maxlen=1)
    if not last:
        raise ValueError("prompt_heatmap yielded no map")
    return last[0]


def check_features_fit(store: FeatureStore, encoder: Any, source: str | Path | None = None) -> None:
    """Refuse features whose width D is not the encoder's embedding size (prompt embeddings
    [T, D'] can only score features [N, D] when D' = D): one DataError naming ``source`` (the
    features file), else the store's own file."""
    if store.embed_dim == encoder.embed_dim:
        return
    if source is not None:
        name = Path(source).name
    else:
        name = store.imported_from or (store.path.name if store.path else "The slide's features")
    raise DataError(
        f"{name} holds {store.embed_dim}-dimensional features "
        f"({store.encoder or 'unknown encoder'}) but {encoder.name} embeds prompts in "
        f"{encoder.embed_dim}; choose the model the features were extracted with.",
        source if source is not None else store.path,
    )


def _features_and_encoder(
    slide: Any,
    model: Any,
    features: Any,
    features_coords: str | Path | None,
    patch_size_level0: int | None,
    device: str,
) -> tuple[Any, Any, Any]:
    """(complete store or None, PartialFeatures or None, encoder): a features file is opened
    and checked (milliseconds) before the model loads (seconds)."""
    from medvl_engine.features import FeatureStore, PartialFeatures, open_features_for_slide

    store = partial = source = None
    if isinstance(features, PartialFeatures):
        partial = features
    elif isinstance(features, FeatureStore):
        store = features
    elif features is not None:
        source = Path(features)
        store = open_features_for_slide(
            source, slide, coords_path=features_coords, patch_size_level0=patch_size_level0
        )
    if isinstance(model, str | Path):
        from medvl_engine.encoders import load_encoder  # torch: after the inputs are checked

        encoder = load_encoder(str(model), device=device)
    else:
        encoder = model
    if store is not None:
        check_features_fit(store, encoder, source)
    elif partial is not None:
        check_features_fit(partial.store, encoder)
    return store, partial, encoder


@dataclass
class ClassifyResult:
    """What :func:`classify` found: the classification (names, scores [K], attention [K, N],
    tau_attn), the features it rests on, the encoder's name, and the features' store."""

    classification: SlideClassification
    store: FeatureStore
    model: str
    store_path: Path | None = None
    extracted: bool = False

    @property
    def ranked(self) -> list[tuple[str, float]]:
        """(class, score) best first; the first is LIMIT Eq. 5's prediction."""
        return self.classification.ranked

    def attention_map(self, name: str) -> Heatmap:
        """Class ``name``'s attention alpha_i * N on the slide (1 = uniform attention)."""
        from medvl_engine.slide_classification import attention_heatmap

        return attention_heatmap(self.store, self.classification, name)

    def attention_maps(self) -> dict[str, Heatmap]:
        """Every class's attention map, by class name."""
        return {name: self.attention_map(name) for name in self.classification.names}


def classify(
    slide: SlideLike | str | Path,
    classes: Sequence[str] | Mapping[str, Sequence[str]],
    model: str | PatchTextEncoder,
    *,
    tau_attn: float | None = None,
    templates: Templates = DEFAULT_TEMPLATES,
    features: FeatureStore | str | Path | None = None,
    features_coords: str | Path | None = None,
    patch_size_level0: int | None = None,
    store_path: str | Path | None = None,
    progress: ProgressCallback | None = None,
    cancel: Cancel = None,
    device: str = "cpu",
) -> ClassifyResult:
    """Zero-shot classification of ``slide`` among ``classes`` (LIMIT Eq. 5, module docstring).

    ``classes``: class prompts (each its own name), or name -> names (synonyms); each class
    is the ensemble of its names in ``templates`` ("conch", "none": the names as they are, a
    file or a list; :func:`~medvl_engine.prompts.ensemble_embeddings`).
    ``tau_attn``: the attention temperature (None: the model folder's ``tau_attn``, else
    0.05). ``model``, ``features``, ``store_path``, ``progress``, ``cancel`` and ``device`` as
    :func:`prompt_heatmap` takes them; features are extracted without partial results.
    """
    from medvl_engine.errors import ConfigError
    from medvl_engine.io.slide import open_slide
    from medvl_engine.slide_classification import classify_with_attention, model_tau_attn

    if len(classes) < 2:
        raise ConfigError(f"classification needs at least two classes, got {len(classes)}.")
    template_list = resolve_templates(templates)
    if template_list is not None:
        classes = expand_classes(check_classes(classes), template_list)
    if tau_attn is None:
        tau_attn = model_tau_attn(str(model) if isinstance(model, str | Path) else model.name)
    tau = tau_attn
    if tau <= 0:
        raise ConfigError(f"the attention temperature must be positive, got {tau}.")
    opened = None if not isinstance(slide, str | Path) else open_slide(slide)
    source = opened if opened is not None else slide
    try:
        store, _, encoder = _features_and_encoder(
            source, model, features, features_coords, patch_size_level0, device
        )
        extracted = store is None
        if store is None:
            from medvl_engine.features import slide_features

            store = slide_features(source, encoder, store_path, progress=progress, cancel=cancel)
        classification = classify_with_attention(store, encoder, classes, tau)
        return ClassifyResult(classification, store, encoder.name, store.path, extracted)
    finally:
        if opened is not None:
            opened.close()


OVERLAPS = (1, 2, 4)


def segment(
    slide: SlideLike | str | Path,
    classes: Sequence[str] | Mapping[str, Sequence[str]],
    model: str | PatchTextEncoder,
    *,
    templates: Templates = DEFAULT_TEMPLATES,
    overlap: int = 1,
    min_confidence: float | None = None,
    logit_scale: float | None = None,
    min_area_um2: float | None = None,
    smooth: float = 0.5,
    simplify: float = 0.25,
    features: FeatureStore | str | Path | None = None,
    features_coords: str | Path | None = None,
    patch_size_level0: int | None = None,
    store_path: str | Path | None = None,
    progress: ProgressCallback | None = None,
    cancel: Cancel = None,
    device: str = "cpu",
    class_embeddings: np.ndarray | torch.Tensor | None = None,
    tissue: tuple[np.ndarray, float] | None = None,
) -> SegmentResult:
    """A tissue map of ``slide`` among ``classes`` with its regions and area table.

    ``classes``: names (each its own only name) or name -> names (synonyms), at least two;
    each becomes the ensemble of its names in ``templates`` (as :func:`classify`). ``overlap``
    1, 2 or 4: patches every 1, 1/2 or 1/4 of their side (one grid, extracted once and cached
    like a heatmap's); ``features`` (a file or a FeatureStore) bring their own grid.
    ``logit_scale`` s (None: the model's, :func:`~medvl_engine.segmentation.model_logit_scale`);
    cells whose best class has probability below ``min_confidence`` (None: 0.5) are
    "uncertain". ``min_area_um2`` (None: 1e4), ``smooth`` and ``simplify`` (cells) shape the
    polygons (:func:`~medvl_engine.segmentation.class_regions`). ``class_embeddings`` c_k
    [K, D] in the order of ``classes`` (None: encoded here) and ``tissue`` (mask bool [h, w],
    level-0 px per mask px; None: :func:`~medvl_engine.tiling.tissue_mask`) may come from a
    caller that keeps them, with the same result. The rest as :func:`classify` takes them.
    No tissue, or a class that wins nowhere, is said in the result's ``notes``.
    """
    from medvl_engine.errors import ConfigError
    from medvl_engine.features import FeatureStore
    from medvl_engine.io.slide import open_slide
    from medvl_engine.segmentation import DEFAULT_MIN_AREA_UM2 as MIN_AREA
    from medvl_engine.segmentation import DEFAULT_MIN_CONFIDENCE, model_logit_scale, segment_store
    from medvl_engine.tiling import tissue_mask

    named = check_classes(classes)
    template_list = resolve_templates(templates)
    if overlap not in OVERLAPS:
        raise ConfigError(f"The overlap must be 1, 2 or 4 patches per side, got {overlap}.")
    if class_embeddings is not None and len(class_embeddings) != len(named):
        raise ConfigError(f"{len(class_embeddings)} class embeddings for {len(named)} classes.")
    if features is not None and overlap != 1 and not isinstance(features, FeatureStore):
        raise ConfigError(
            "A features file brings its own patch grid; leave the overlap at 1, or drop the "
            "features to extract an overlapping grid."
        )
    opened = None if not isinstance(slide, str | Path) else open_slide(slide)
    source: Any = opened if opened is not None else slide
    try:
        store, _, encoder = _features_and_encoder(
            source, model, features, features_coords, patch_size_level0, device
        )
        extracted = store is None
        if store is None:
            from medvl_engine.features import slide_features

            stride = max(1, encoder.patch_size // overlap)
            store = slide_features(
                source, encoder, store_path, stride=stride, progress=progress, cancel=cancel
            )
        if class_embeddings is None:  # [K, D]
            class_embeddings = ensemble_embeddings(encoder.encode_text, named, template_list)
        tissue = tissue_mask(source) if tissue is None else tissue
        result = segment_store(
            store,
            named,
            class_embeddings,
            tissue=tissue,
            logit_scale=model_logit_scale(encoder) if logit_scale is None else logit_scale,
            min_confidence=DEFAULT_MIN_CONFIDENCE if min_confidence is None else min_confidence,
            min_area_um2=MIN_AREA if min_area_um2 is None else min_area_um2,
            smooth=smooth,
            simplify=simplify,
            slide_dimensions=(int(source.dimensions[0]), int(source.dimensions[1])),
            model=encoder.name,
            templates=template_list,
        )
        result.extracted = extracted
        return result
    finally:
        if opened is not None:
            opened.close()
