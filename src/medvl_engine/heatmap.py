"""Prompt heatmaps from a feature store: per-patch scores, a grid, and its world transform.

Scores (v_i: L2-normalised patch features [N, D], t_k: normalised prompt embeddings [T, D]):
    cosine    s_i = v_i . t_target                                   (LIMIT per-patch heatmap)
    softmax   s_i = exp(v_i . t_target / T) / sum_k exp(v_i . t_k / T)   (class probability)
    contrast  s_i = v_i . t_0 - v_i . t_1                            (prompt A minus prompt B)
The prompts each mode takes and the label of the map: :mod:`medvl_engine.prompts`.
The grid has one cell per stride step of the patch grid; with overlapping patches
(stride < patch size) each cell is the mean score of all patches covering it.
World frame of the viewer layers: micrometres when the slide has an mpp, else level-0 px;
level-0 pixel (x, y) covers [x, x + 1) x [y, y + 1) before scaling, origin at the slide's
top-left corner.
Importing this module does not import torch (the functions that score do): a Heatmap holds
numpy arrays only, so napari's process can receive one from the model process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

from medvl_engine.errors import ConfigError, DataError
from medvl_engine.features.store import FeatureStore
from medvl_engine.prompts import MODES, NORMALIZATIONS

__all__ = [
    "class_embeddings",
    "classify_slide",
    "Heatmap",
    "PatchLayoutLike",
    "PromptEncoder",
    "normalize_scores",
    "patch_scores",
    "place_scores",
    "similarity_map",
    "top_patches",
]

_DEFAULT_RANGE = {"cosine": (-1.0, 1.0), "softmax": (0.0, 1.0), "contrast": (-2.0, 2.0)}


class PatchLayoutLike(Protocol):
    """Where scored patches lie: a FeatureStore or an export's saved PatchLayout."""

    @property
    def coords(self) -> np.ndarray: ...  # int64 [N, 2] (x, y) level-0 px, top-left

    @property
    def patch_size_level0(self) -> int: ...


class PromptEncoder(Protocol):
    """What scoring prompts needs of a model (every ``PatchTextEncoder`` has it)."""

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """T prompts -> float32 [T, D] embeddings."""
        ...


@dataclass
class Heatmap:
    """A score grid placed on the slide.

    ``grid`` float32 [rows, cols], NaN where no patch lies; cell (r, c) covers level-0 px
    x in [origin_x + c * cell, origin_x + (c + 1) * cell), y likewise (``cell`` =
    ``cell_size_level0``). ``scale``/``translate`` are the viewer's (y, x) transform of the grid in
    ``units`` ("um" or "px"). ``scores`` float32 [N] are the per-patch values in store order.
    """

    grid: np.ndarray
    scores: np.ndarray
    origin_level0: tuple[int, int]
    cell_size_level0: int
    scale: tuple[float, float]
    translate: tuple[float, float]
    units: str
    mode: str = "cosine"
    normalize: str = "none"
    prompt: str = ""
    value_range: tuple[float, float] = (0.0, 1.0)
    metadata: dict[str, Any] = field(default_factory=dict)

    def cell_to_level0(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Top-left (x, y) level-0 px [N, 2] of grid cells given by row and column indices."""
        x = self.origin_level0[0] + np.asarray(cols) * self.cell_size_level0
        y = self.origin_level0[1] + np.asarray(rows) * self.cell_size_level0
        return np.stack([x, y], axis=-1).astype(np.int64)


def patch_scores(
    store: FeatureStore,
    text_embeddings: torch.Tensor | np.ndarray,
    mode: str = "cosine",
    target: int = 0,
    temperature: float = 0.01,
) -> np.ndarray:
    """Per-patch scores float32 [N] for prompt ``target`` of ``text_embeddings`` [T, D]."""
    import torch

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    text = torch.as_tensor(text_embeddings, dtype=torch.float32)
    text = text.unsqueeze(0) if text.ndim == 1 else text
    if text.ndim != 2 or text.shape[1] != store.embed_dim:
        raise DataError(
            f"Prompt embeddings of shape {tuple(text.shape)} do not match the feature store's "
            f"{store.embed_dim} dimensions ({store.encoder or 'unknown encoder'}); encode the "
            "prompts with the model the features were extracted with."
        )
    if not 0 <= target < text.shape[0]:
        raise ValueError(f"target {target} is not one of the {text.shape[0]} prompts")
    text = torch.nn.functional.normalize(text, dim=-1)
    features = store.torch_features
    if mode == "cosine":
        return (features @ text[target]).numpy()
    if mode == "contrast":
        if text.shape[0] != 2:
            raise ValueError(f"contrast needs exactly 2 prompts (A, B), got {text.shape[0]}")
        return (features @ (text[0] - text[1])).numpy()
    logits = (features @ text.T) / temperature  # [N, T]
    return torch.softmax(logits, dim=1)[:, target].contiguous().numpy()


def normalize_scores(
    scores: np.ndarray, method: str = "none", value_range: tuple[float, float] | None = None
) -> np.ndarray:
    """Rescale scores [N]: none, percentile rank in [0, 1] (CLAM), min-max, or a fixed range."""
    if method not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {method!r}")
    scores = np.asarray(scores, dtype=np.float32)
    if method == "none" or scores.size == 0:
        return scores
    if method == "percentile":
        ranks = np.empty(scores.size, dtype=np.float32)
        ranks[np.argsort(scores, kind="stable")] = np.arange(scores.size, dtype=np.float32)
        return ranks / max(scores.size - 1, 1)
    if method == "minmax":
        low, high = float(scores.min()), float(scores.max())
    else:
        if value_range is None:
            raise ValueError("normalize='fixed' needs value_range=(low, high)")
        low, high = float(value_range[0]), float(value_range[1])
    span = high - low if high > low else 1.0
    out = (scores - low) / span
    return np.clip(out, 0.0, 1.0) if method == "fixed" else out


def similarity_map(
    store: FeatureStore,
    text_embeddings: torch.Tensor | np.ndarray,
    mode: str = "cosine",
    normalize: str = "none",
    *,
    target: int = 0,
    temperature: float = 0.01,
    value_range: tuple[float, float] | None = None,
    smooth_sigma: float = 0.0,
    prompt: str = "",
    known: np.ndarray | None = None,
) -> Heatmap:
    """Heatmap of prompt ``target`` over the slide (see the module docstring for the modes).

    ``text_embeddings`` [T, D] come from ``encoder.encode_text``; ``value_range`` is the fixed
    range for normalize="fixed"; ``smooth_sigma`` (in grid cells) applies a NaN-aware Gaussian.
    ``known`` bool [N] marks the patches whose features are computed so far (a store being
    filled in): the others score NaN and normalisation uses the known ones only; the grid keeps
    the whole store's layout, so a partial map lands where the complete one will.
    """
    raw = patch_scores(store, text_embeddings, mode, target, temperature)
    fixed_range = value_range if value_range is not None else _DEFAULT_RANGE[mode]
    if known is None:
        scores = normalize_scores(raw, normalize, fixed_range)
    else:
        known = np.asarray(known, dtype=bool).reshape(-1)
        if known.shape != raw.shape:
            raise ValueError(f"known marks {known.size} patches, the store holds {raw.size}")
        scores = np.full(raw.shape, np.nan, dtype=np.float32)
        scores[known] = normalize_scores(raw[known], normalize, fixed_range)
    if normalize in ("percentile", "minmax", "fixed"):
        shown = (0.0, 1.0)
    elif mode == "softmax":
        shown = (0.0, 1.0)
    else:
        finite = scores[np.isfinite(scores)]
        shown = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    return place_scores(
        store,
        scores,
        mode=mode,
        normalize=normalize,
        prompt=prompt,
        value_range=shown,
        smooth_sigma=smooth_sigma,
    )


def place_scores(
    store: FeatureStore,
    scores: np.ndarray,
    *,
    mode: str = "cosine",
    normalize: str = "none",
    prompt: str = "",
    value_range: tuple[float, float] = (0.0, 1.0),
    smooth_sigma: float = 0.0,
) -> Heatmap:
    """Per-patch ``scores`` float32 [N] (store order, NaN = none) as a Heatmap on the store's
    grid: one cell per stride step (the mean of the patches covering it), placed in the world
    frame (micrometres when the store has an mpp, else level-0 px; see the module docstring).
    ``smooth_sigma`` (in grid cells) applies a NaN-aware Gaussian; the other arguments are
    recorded on the Heatmap as they are."""
    scores = np.asarray(scores, dtype=np.float32)
    grid = _scores_to_grid(store, scores)
    if smooth_sigma > 0:
        grid = _smooth(grid, smooth_sigma)
    layout = _layout(store)
    cell = layout["cell"]
    origin_x, origin_y = layout["origin"]
    if store.mpp is not None:
        mpp_x, mpp_y, units = float(store.mpp[0]), float(store.mpp[1]), "um"
    else:
        mpp_x, mpp_y, units = 1.0, 1.0, "px"
    return Heatmap(
        grid=grid,
        scores=scores,
        origin_level0=(origin_x, origin_y),
        cell_size_level0=cell,
        scale=(cell * mpp_y, cell * mpp_x),
        translate=((origin_y + cell / 2) * mpp_y, (origin_x + cell / 2) * mpp_x),
        units=units,
        mode=mode,
        normalize=normalize,
        prompt=prompt,
        value_range=value_range,
        metadata={"encoder": store.encoder, "slide": store.slide},
    )


def top_patches(
    store: PatchLayoutLike, scores: np.ndarray, n: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` highest-scoring patches, best first (CLAM's top-k sampling); NaN never qualifies.

    ``store``: the feature store or saved patch layout the ``scores`` [N] are in the order of.
    Returns boxes int64 [n, 4] as (x0, y0, x1, y1) level-0 px and their scores float32 [n].
    """
    scores = np.asarray(scores, dtype=np.float32)
    n_patches = len(store.coords)
    if scores.shape != (n_patches,):
        raise DataError(
            f"Got {scores.size} scores for a feature store of {n_patches} patches; "
            "score the same store you pass."
        )
    valid = np.flatnonzero(np.isfinite(scores))
    n = int(min(max(n, 0), valid.size))
    if n == 0:
        return np.zeros((0, 4), np.int64), np.zeros(0, np.float32)
    chosen = valid[np.argpartition(-scores[valid], n - 1)[:n]] if n < valid.size else valid
    chosen = chosen[np.argsort(-scores[chosen], kind="stable")]
    top_left = store.coords[chosen]
    boxes = np.concatenate([top_left, top_left + store.patch_size_level0], axis=1)
    return boxes.astype(np.int64), scores[chosen]


def classify_slide(
    store: FeatureStore,
    encoder: PromptEncoder,
    class_prompts: Sequence[str] | Mapping[str, Sequence[str]],
    tau_attn: float = 0.05,
) -> list[tuple[str, float]]:
    """Zero-shot slide classification by report-guided pooling (LIMIT Eq. 1-2 and 5).

    Each class embedding c_k [D] (the normalised mean of its prompts' embeddings when a class
    has several) queries the patches: h_W(c_k) = sum_i softmax_i(v_i . c_k / tau_attn) v_i;
    the class score is cos(h_W(c_k), c_k) and the prediction is the argmax. Returns
    (class, score) pairs, best first.
    """
    import torch

    from medvl_engine.models.limit import report_guided_pool

    names, classes = class_embeddings(store, encoder, class_prompts)  # [K, D]
    pooled = report_guided_pool(store.torch_features, classes, tau_attn)  # [K, D]
    scores = torch.nn.functional.cosine_similarity(pooled, classes, dim=-1).tolist()
    return sorted(zip(names, scores, strict=True), key=lambda item: -item[1])


def class_embeddings(
    store: FeatureStore,
    encoder: PromptEncoder,
    class_prompts: Sequence[str] | Mapping[str, Sequence[str]],
) -> tuple[list[str], torch.Tensor]:
    """Class names and embeddings c_k ``[K, D]`` for zero-shot classification (LIMIT Eq. 5):
    the normalised mean of each class's prompt embeddings (a plain list: one prompt per class,
    its own name). Checked against ``store``: at least two distinct classes, patches to
    classify, the store's embedding width; each problem is one ConfigError or DataError."""
    import torch

    if isinstance(class_prompts, Mapping):
        names = [str(name) for name in class_prompts]
        groups = [_as_list(class_prompts[name]) for name in class_prompts]
    else:
        names = [str(name) for name in class_prompts]
        groups = [[name] for name in names]
    if len(names) < 2:
        raise ConfigError(f"classification needs at least two classes, got {len(names)}.")
    if len(set(names)) != len(names):
        raise ConfigError("two classes have the same name; give each class once.")
    if store.n_patches == 0:
        raise DataError(
            f"Feature store {store.path or store.slide} holds no patches (no tissue found); "
            "nothing to classify."
        )
    classes = torch.stack(
        [
            torch.nn.functional.normalize(encoder.encode_text(group).mean(0), dim=0)
            for group in groups
        ]
    )  # [K, D]
    if classes.shape[1] != store.embed_dim:
        raise DataError(
            f"The prompts embed to {classes.shape[1]} dimensions but the feature store holds "
            f"{store.embed_dim}; use the model the features were extracted with ({store.encoder})."
        )
    return names, classes


def _as_list(prompts: str | Sequence[str]) -> list[str]:
    return [prompts] if isinstance(prompts, str) else list(prompts)


def _layout(store: FeatureStore) -> dict[str, Any]:
    """Grid geometry of a store, computed once and cached on it: cell indices of every patch."""
    cached: dict[str, Any] | None = store.__dict__.get("_heatmap_layout")
    if cached is not None:
        return cached
    cell = max(int(store.stride_level0), 1)
    coords = store.coords
    origin = coords.min(axis=0) if len(coords) else np.zeros(2, np.int64)
    cells_per_patch = max(1, -(-int(store.patch_size_level0) // cell))
    index = (coords - origin) // cell  # [N, 2] (col, row)
    cols = int(index[:, 0].max()) + cells_per_patch if len(coords) else 0
    rows = int(index[:, 1].max()) + cells_per_patch if len(coords) else 0
    offsets = [(dy, dx) for dy in range(cells_per_patch) for dx in range(cells_per_patch)]
    flat = np.stack([(index[:, 1] + dy) * cols + (index[:, 0] + dx) for dy, dx in offsets])
    counts = np.bincount(flat.ravel(), minlength=rows * cols).astype(np.float32)
    layout: dict[str, Any] = {
        "cell": cell,
        "origin": (int(origin[0]), int(origin[1])),
        "shape": (rows, cols),
        "flat": flat,  # [cells_per_patch ** 2, N]
        "counts": counts,
        "simple": cells_per_patch == 1 and np.unique(flat[0]).size == len(coords),
    }
    store.__dict__["_heatmap_layout"] = layout
    return layout


def _scores_to_grid(store: FeatureStore, scores: np.ndarray) -> np.ndarray:
    layout = _layout(store)
    rows, cols = layout["shape"]
    if layout["simple"]:
        grid = np.full(rows * cols, np.nan, dtype=np.float32)
        grid[layout["flat"][0]] = scores
        return grid.reshape(rows, cols)
    flat = layout["flat"]
    sums = np.bincount(flat.ravel(), weights=np.tile(scores, flat.shape[0]), minlength=rows * cols)
    counts = layout["counts"]
    with np.errstate(invalid="ignore", divide="ignore"):
        grid = np.where(counts > 0, sums / counts, np.nan).astype(np.float32)
    return grid.reshape(rows, cols)


def _smooth(grid: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian smoothing that ignores NaN cells and keeps them NaN."""
    from scipy.ndimage import gaussian_filter

    valid = np.isfinite(grid)
    values = gaussian_filter(np.where(valid, grid, 0.0).astype(np.float64), sigma, mode="constant")
    weights = gaussian_filter(valid.astype(np.float64), sigma, mode="constant")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = values / weights
    return np.where(valid, out, np.nan).astype(np.float32)
