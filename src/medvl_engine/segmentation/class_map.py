"""A multi-class tissue map: per-patch class probabilities placed on the patch grid.

With v_i the L2-normalised patch features [N, D], c_k the class embeddings [K, D] (a prompt
ensemble each, :func:`medvl_engine.prompts.ensemble_embeddings`) and s the model's logit scale:

    p_ik = softmax_k(s * v_i . c_k)                                   p [N, K]

The map has one cell per stride step of the patch grid (one patch per cell without overlap;
with patches every 1/2 or 1/4 of their side, 4 or 16 patches cover a cell), and each cell
averages the probabilities of the patches covering it:

    P_kc = (1 / |{i : c in patch i}|) sum_{i : c in patch i} p_ik      P [K, rows, cols]

A cell is tissue when the slide's tissue mask covers its centre (and a patch covers it); its
label is argmax_k P_kc, or "uncertain" when max_k P_kc is below ``min_confidence``. Cell
(r, c) covers level-0 px x in [origin_x + c * cell, origin_x + (c + 1) * cell), y likewise.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import ConfigError, DataError

if TYPE_CHECKING:
    import torch

    from medvl_engine.features import FeatureStore

__all__ = [
    "DEFAULT_LOGIT_SCALE",
    "DEFAULT_MIN_CONFIDENCE",
    "NO_TISSUE",
    "UNCERTAIN",
    "ClassMap",
    "class_map",
    "class_probabilities",
    "model_logit_scale",
]

DEFAULT_LOGIT_SCALE = 100.0  # CLIP/CONCH's trained scale (1 / 0.01, the heatmap softmax's T)
DEFAULT_MIN_CONFIDENCE = 0.5
NO_TISSUE = "no tissue"
UNCERTAIN = "uncertain"


def model_logit_scale(encoder: Any) -> float:
    """The softmax scale s of ``encoder``: its ``logit_scale`` attribute, else ``logit_scale``
    in its model folder's config.json, else :data:`DEFAULT_LOGIT_SCALE`."""
    value = getattr(encoder, "logit_scale", None)
    if value is None:
        config = Path(str(getattr(encoder, "name", ""))) / "config.json"
        try:
            if config.is_file():
                value = json.loads(config.read_text(encoding="utf-8")).get("logit_scale")
        except (OSError, ValueError, AttributeError):
            value = None
    try:
        scale = float(value) if value is not None else DEFAULT_LOGIT_SCALE
    except (TypeError, ValueError):
        return DEFAULT_LOGIT_SCALE
    return scale if math.isfinite(scale) and scale > 0 else DEFAULT_LOGIT_SCALE


def class_probabilities(
    features: np.ndarray | torch.Tensor, classes: np.ndarray | torch.Tensor, logit_scale: float
) -> np.ndarray:
    """p = softmax_k(s * v_i . c_k): features [N, D], class embeddings [K, D] -> float32 [N, K]
    (both L2-normalised; the class embeddings are normalised again here)."""
    import torch

    if not (math.isfinite(logit_scale) and logit_scale > 0):
        raise ConfigError(f"The logit scale must be a positive number, got {logit_scale}.")
    v = torch.as_tensor(features, dtype=torch.float32)
    c = torch.nn.functional.normalize(torch.as_tensor(classes, dtype=torch.float32), dim=-1)
    if v.ndim != 2 or c.ndim != 2 or v.shape[1] != c.shape[1]:
        raise DataError(
            f"Class embeddings of shape {tuple(c.shape)} cannot score features of shape "
            f"{tuple(v.shape)}; use the model the features were extracted with."
        )
    with torch.no_grad():
        return torch.softmax(logit_scale * (v @ c.T), dim=1).numpy()


@dataclass
class ClassMap:
    """The tissue map (see the module docstring).

    ``names``: the K classes. ``labels`` int16 [rows, cols]: 0 no tissue, k + 1 class k, K + 1
    uncertain (:attr:`label_names` in that order). ``probabilities`` float32 [K, rows, cols]
    (NaN where no patch lies), ``confidence`` float32 [rows, cols] = max_k P (NaN likewise),
    ``patch_probabilities`` float32 [N, K] in store order. The grid starts at ``origin_level0``
    (x, y) with square cells of ``cell_size_level0`` level-0 px; ``mpp`` (x, y) um per level-0
    px or None; ``slide_dimensions`` (width, height) level-0 px.
    """

    names: list[str]
    labels: np.ndarray
    probabilities: np.ndarray
    confidence: np.ndarray
    patch_probabilities: np.ndarray
    origin_level0: tuple[int, int]
    cell_size_level0: int
    mpp: tuple[float, float] | None
    slide_dimensions: tuple[int, int]
    min_confidence: float
    logit_scale: float

    @property
    def label_names(self) -> list[str]:
        """Name of each label value: "no tissue", the classes, "uncertain"."""
        return [NO_TISSUE, *self.names, UNCERTAIN]

    @property
    def uncertain_label(self) -> int:
        return len(self.names) + 1

    @property
    def units(self) -> str:
        return "um" if self.mpp is not None else "px"

    @property
    def scale(self) -> tuple[float, float]:
        """(y, x) size of a cell in the world frame (um with an mpp, else level-0 px)."""
        mx, my = self.mpp if self.mpp is not None else (1.0, 1.0)
        return (self.cell_size_level0 * my, self.cell_size_level0 * mx)

    @property
    def translate(self) -> tuple[float, float]:
        """(y, x) of the first cell's centre in the world frame (napari's convention)."""
        mx, my = self.mpp if self.mpp is not None else (1.0, 1.0)
        half = self.cell_size_level0 / 2
        return ((self.origin_level0[1] + half) * my, (self.origin_level0[0] + half) * mx)

    def cell_areas_px2(self) -> np.ndarray:
        """float64 [rows, cols]: level-0 px^2 of each cell inside the slide (edge cells are cut)."""
        rows, cols = self.labels.shape
        cell = self.cell_size_level0
        width, height = self.slide_dimensions
        x0 = self.origin_level0[0] + np.arange(cols) * cell
        y0 = self.origin_level0[1] + np.arange(rows) * cell
        w = np.clip(np.minimum(x0 + cell, width) - np.maximum(x0, 0), 0, None)
        h = np.clip(np.minimum(y0 + cell, height) - np.maximum(y0, 0), 0, None)
        return np.outer(h, w).astype(np.float64)

    def px2_to_um2(self, area_px2: float) -> float | None:
        """An area in level-0 px^2 in um^2 (None without an mpp)."""
        return None if self.mpp is None else float(area_px2 * self.mpp[0] * self.mpp[1])


def class_map(
    store: FeatureStore,
    probabilities: np.ndarray,
    names: list[str],
    *,
    tissue: tuple[np.ndarray, float] | None = None,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    logit_scale: float = DEFAULT_LOGIT_SCALE,
    slide_dimensions: tuple[int, int] | None = None,
) -> ClassMap:
    """Place per-patch ``probabilities`` [N, K] (store order) on the store's grid (module
    docstring). ``tissue``: (mask bool [h, w], level-0 px per mask px) from
    :func:`medvl_engine.tiling.tissue_mask`; None: every cell a patch covers is tissue."""
    probabilities = np.asarray(probabilities, dtype=np.float32)
    n_patches, k = store.n_patches, len(names)
    if probabilities.shape != (n_patches, k):
        raise DataError(
            f"Got class probabilities of shape {probabilities.shape} for {n_patches} patches "
            f"and {k} classes."
        )
    if not 0.0 <= min_confidence <= 1.0:
        raise ConfigError(f"The minimum confidence must lie in [0, 1], got {min_confidence}.")
    coords = store.coords
    cell = max(int(store.stride_level0), 1)
    dims = slide_dimensions or store.slide_dimensions
    if dims is None:
        reach = coords.max(axis=0) + store.patch_size_level0 if n_patches else np.zeros(2)
        dims = (int(reach[0]), int(reach[1]))
    origin = coords.min(axis=0) if n_patches else np.zeros(2, np.int64)
    per_patch = max(1, -(-int(store.patch_size_level0) // cell))
    index = (coords - origin) // cell  # [N, 2] (col, row)
    cols = int(index[:, 0].max()) + per_patch if n_patches else 0
    rows = int(index[:, 1].max()) + per_patch if n_patches else 0
    flat = (
        np.concatenate(
            [
                (index[:, 1] + dy) * cols + (index[:, 0] + dx)
                for dy in range(per_patch)
                for dx in range(per_patch)
            ]
        )
        if n_patches
        else np.zeros(0, np.int64)
    )
    counts = np.bincount(flat, minlength=rows * cols).astype(np.float64)
    sums = (
        np.stack(
            [
                np.bincount(
                    flat, weights=np.tile(probabilities[:, j], per_patch**2), minlength=rows * cols
                )
                for j in range(k)
            ]
        )
        if k
        else np.zeros((0, rows * cols))
    )
    covered = counts > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(covered, sums / counts, np.nan).astype(np.float32)  # [K, cells]
    grid = mean.reshape(k, rows, cols)
    is_tissue = covered.reshape(rows, cols) & _tissue_at_centres(
        tissue, (int(origin[0]), int(origin[1])), cell, (rows, cols), dims
    )
    if rows and cols and k:
        confidence = np.nanmax(np.where(covered.reshape(rows, cols), grid, -1.0), axis=0)
        confidence = np.where(covered.reshape(rows, cols), confidence, np.nan).astype(np.float32)
        winner = np.argmax(np.nan_to_num(grid, nan=-1.0), axis=0)
    else:
        confidence = np.full((rows, cols), np.nan, np.float32)
        winner = np.zeros((rows, cols), np.int64)
    labels = np.where(is_tissue, winner + 1, 0).astype(np.int16)
    labels[is_tissue & (confidence < min_confidence)] = k + 1
    mpp = (float(store.mpp[0]), float(store.mpp[1])) if store.mpp is not None else None
    return ClassMap(
        names=list(names),
        labels=labels,
        probabilities=grid,
        confidence=confidence,
        patch_probabilities=probabilities,
        origin_level0=(int(origin[0]), int(origin[1])),
        cell_size_level0=cell,
        mpp=mpp,
        slide_dimensions=(int(dims[0]), int(dims[1])),
        min_confidence=float(min_confidence),
        logit_scale=float(logit_scale),
    )


def _tissue_at_centres(
    tissue: tuple[np.ndarray, float] | None,
    origin: tuple[int, int],
    cell: int,
    shape: tuple[int, int],
    dims: tuple[int, int],
) -> np.ndarray:
    """bool [rows, cols]: the cell's centre lies inside the slide and on the tissue mask."""
    rows, cols = shape
    x = origin[0] + (np.arange(cols) + 0.5) * cell
    y = origin[1] + (np.arange(rows) + 0.5) * cell
    inside = (y[:, None] < dims[1]) & (x[None, :] < dims[0])
    if tissue is None:
        return inside
    mask, downsample = np.asarray(tissue[0], bool), float(tissue[1])
    c = np.floor(x / downsample).astype(np.int64)
    r = np.floor(y / downsample).astype(np.int64)
    ok_c = (c >= 0) & (c < mask.shape[1])
    ok_r = (r >= 0) & (r < mask.shape[0])
    on = np.zeros(shape, bool)
    on[np.ix_(ok_r, ok_c)] = mask[np.ix_(r[ok_r], c[ok_c])]
    return inside & on
