"""One breast's share of the localisation metrics (Pointing Game, pixel-level AP) on the
G x G candidate grid."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.evaluation.metrics import (
    pointing_game,
)

if TYPE_CHECKING:
    pass

__all__ = ["localisation_parts"]


def _box_mask(boxes: np.ndarray, size: int, scale: float) -> np.ndarray:
    mask = np.zeros((size, size), dtype=bool)
    for x0, y0, x1, y1 in np.asarray(boxes).reshape(-1, 4) * scale:
        mask[int(np.floor(y0)) : int(np.ceil(y1)), int(np.floor(x0)) : int(np.ceil(x1))] = True
    return mask


def localisation_parts(
    importance: np.ndarray,
    boxes: np.ndarray,
    geometry: PatchGeometry,
    ap_resolution: int = 192,
    tolerance: float | None = None,
) -> tuple[bool, float, np.ndarray, np.ndarray, np.ndarray]:
    """One breast's share of the localisation metrics: ``(hit, chance, cell_scores [N],
    positive_px [N], negative_px [N])``.

    importance ``[G, G]``; boxes ``[M, 4]`` (x0, y0, x1, y1) breast px, M >= 1. ``hit``: the
    Pointing Game on this breast; ``chance``: the share of candidates it would count a hit.
    The map painted at ``ap_resolution`` px has one value per cell, so the pixel-level AP only
    needs, per cell, its score and the numbers of ROI / non-ROI pixels painted with it
    (:func:`~medvl_engine.evaluation.metrics.weighted_average_precision` of the pooled cells
    equals the AP of the pooled pixels).
    """
    tolerance = geometry.stride / 2.0 if tolerance is None else tolerance
    centres = geometry.offset + geometry.stride * np.arange(geometry.grid) + geometry.patch_size / 2
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    # Boxes in grid-index units: the half-open range of candidate centres each box holds.
    grown = boxes + np.array([-tolerance, -tolerance, tolerance, tolerance])
    index_boxes = np.stack(
        [np.searchsorted(centres, grown[:, j], side="left") for j in range(4)], axis=1
    )
    hit = pointing_game(importance, index_boxes)
    covered = np.zeros((geometry.grid, geometry.grid), dtype=bool)
    for x0, y0, x1, y1 in index_boxes:
        covered[y0:y1, x0:x1] = True
    cells = _painted_cells(geometry, ap_resolution).ravel()
    inside = _box_mask(boxes, ap_resolution, ap_resolution / geometry.image_size).ravel()
    count = geometry.grid * geometry.grid
    positive = np.bincount(cells[inside], minlength=count).astype(np.float64)
    negative = np.bincount(cells[~inside], minlength=count).astype(np.float64)
    return hit, float(covered.mean()), np.asarray(importance).ravel(), positive, negative


def _painted_cells(geometry: PatchGeometry, resolution: int) -> np.ndarray:
    """``[R, R]``: the row-major cell index ``row * G + col`` that paints each pixel of the
    image at ``resolution`` px (a pixel shows the cell whose stride-wide band holds it)."""
    edges = geometry.cell_bounds() * resolution / geometry.image_size
    centres = np.arange(resolution) + 0.5
    cell = np.clip(np.searchsorted(edges, centres, side="right") - 1, 0, geometry.grid - 1)
    return cell[:, None] * geometry.grid + cell[None, :]
