"""Regions of a class map: per class, polygons with holes in level-0 px, and an area table.

The cells of one label, less its connected groups (4-connectivity) under ``min_area_um2``,
become polygons: the mask (blurred by a Gaussian of ``smooth`` cells when > 0, which rounds
the staircase of the grid) is traced at level 0.5 by marching squares on cell centres
(skimage.measure.find_contours),
simplified by Douglas-Peucker with a tolerance of ``simplify`` cells (:func:`simplify_rings`)
and mapped to level-0 px
    x = origin_x + (col + 0.5) * cell,   y = origin_y + (row + 0.5) * cell,
clipped to the slide, [0, width] x [0, height]. The first ring of a polygon is its outline,
the others its holes; groups and holes smaller than ``min_area_um2`` are dropped. The area
table counts the map's cells (every cell, however small its group): a class's area and its
share of the tissue (all classes plus "uncertain").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from medvl_engine.errors import ConfigError
from medvl_engine.segmentation.class_map import ClassMap

__all__ = [
    "DEFAULT_MIN_AREA_UM2",
    "FALLBACK_MPP",
    "Region",
    "area_table",
    "class_regions",
    "simplify_ring",
    "simplify_rings",
]

DEFAULT_MIN_AREA_UM2 = 1.0e4  # 0.01 mm^2, a little under one 224 px patch at 0.5 um/px
FALLBACK_MPP = 0.5  # um per level-0 px assumed for um^2 limits on a slide without an mpp


@dataclass
class Region:
    """One polygon of class ``name`` (label value ``label`` of the map): ``rings`` float64
    [M, 2] (x, y) level-0 px, closed (first point repeated), the outline first, then holes.
    ``area_px2`` is the outline's area minus its holes' (level-0 px^2); ``area_um2`` the same
    in um^2 (None without an mpp); ``mpp`` (x, y) um per level-0 px or None."""

    label: int
    name: str
    rings: list[np.ndarray]
    area_px2: float
    area_um2: float | None
    mpp: tuple[float, float] | None = None

    @property
    def rings_um(self) -> list[np.ndarray] | None:
        """The rings in um (x, y) from the slide's top-left corner; None without an mpp."""
        if self.mpp is None:
            return None
        return [ring * np.asarray(self.mpp, dtype=np.float64) for ring in self.rings]


def class_regions(
    class_map: ClassMap,
    *,
    min_area_um2: float = DEFAULT_MIN_AREA_UM2,
    smooth: float = 0.5,
    simplify: float = 0.25,
) -> list[Region]:
    """Polygons of every class and of "uncertain" (module docstring), largest first per label."""
    from scipy import ndimage

    if min_area_um2 < 0 or smooth < 0 or simplify < 0:
        raise ConfigError("The minimum area, smoothing and simplification cannot be negative.")
    cell = float(class_map.cell_size_level0)
    mpp = class_map.mpp or (FALLBACK_MPP, FALLBACK_MPP)
    min_px2 = min_area_um2 / (mpp[0] * mpp[1])
    min_cells = max(min_px2 / cell**2, 1.0)
    names = class_map.label_names
    margin = int(np.ceil(3 * smooth)) + 1
    regions: list[Region] = []
    for label in range(1, len(names)):
        mask = class_map.labels == label
        if not mask.any():
            continue
        groups, count = ndimage.label(mask)  # groups under the minimum area go first
        large = np.bincount(groups.ravel(), minlength=count + 1) >= min_cells
        large[0] = False
        mask = large[groups]
        if not mask.any():
            continue
        found: list[Region] = []
        for rings_rc in _polygons(np.pad(mask, margin), smooth, simplify, min_cells):
            rings = [_to_level0(ring, (-margin, -margin), class_map) for ring in rings_rc]
            area = _area(rings[0]) - sum(_area(r) for r in rings[1:])
            if area < min_px2 or area <= 0:
                continue
            area_um2 = class_map.px2_to_um2(area)
            found.append(Region(label, names[label], rings, area, area_um2, class_map.mpp))
        regions.extend(sorted(found, key=lambda region: -region.area_px2))
    return regions


def _polygons(
    mask: np.ndarray, smooth: float, simplify: float, min_cells: float
) -> list[list[np.ndarray]]:
    """Rings (row, col) of a padded mask: [[outline, *holes], ...]; each hole goes to the
    smallest outline around it (an island inside a hole keeps its own holes)."""
    from scipy.ndimage import gaussian_filter
    from skimage.measure import find_contours, points_in_poly

    values = mask.astype(np.float32)
    field = gaussian_filter(values, smooth, mode="constant") if smooth > 0 else values
    outers: list[tuple[np.ndarray, float]] = []
    holes: list[np.ndarray] = []
    contours = [  # the padding closes every contour
        c
        for c in find_contours(field, 0.5, positive_orientation="high")
        if len(c) >= 4 and np.array_equal(c[0], c[-1])
    ]
    for ring in simplify_rings(contours, simplify):
        if len(ring) < 4:
            continue
        signed = _signed_area_rc(ring)
        if abs(signed) < min_cells:
            continue
        if signed < 0:
            outers.append((ring, -signed))
        else:
            holes.append(ring)
    if not outers:
        return []
    low = np.array([ring.min(axis=0) for ring, _ in outers])
    high = np.array([ring.max(axis=0) for ring, _ in outers])
    owned: list[list[np.ndarray]] = [[] for _ in outers]
    for hole in holes:
        point = hole[:1]
        around = np.flatnonzero(((low <= point) & (point <= high)).all(axis=1))
        inside = [i for i in around if points_in_poly(point, outers[i][0])[0]]
        if inside:
            owned[min(inside, key=lambda i: outers[i][1])].append(hole)
    return [[ring, *own] for (ring, _), own in zip(outers, owned, strict=True)]


def simplify_ring(ring: np.ndarray, tolerance: float) -> np.ndarray:
    """Douglas-Peucker simplification of one closed ring [M, 2] (:func:`simplify_rings`)."""
    return simplify_rings([ring], tolerance)[0]


def simplify_rings(rings: list[np.ndarray], tolerance: float) -> list[np.ndarray]:
    """Douglas-Peucker simplification of closed rings [M_j, 2] (first point == last): a ring
    keeps the points farther than ``tolerance`` from the chord between the points kept around
    them. Each ring starts with its first, last and farthest-from-first points kept (so no
    chord has zero length); every round then adds, for every chord at once, the farthest
    point beyond the tolerance, until none is. Returns the kept points of each ring."""
    if not rings:
        return []
    if tolerance <= 0:
        return list(rings)
    lengths = np.array([len(ring) for ring in rings])
    points = np.concatenate(rings).astype(np.float64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    keep = np.zeros(len(points), bool)
    keep[starts] = keep[ends - 1] = True
    for start, ring in zip(starts, rings, strict=True):
        keep[start + int(np.argmax(np.hypot(*(ring - ring[0]).T)))] = True
    while True:
        kept = np.flatnonzero(keep)
        candidates = np.flatnonzero(~keep)
        if not candidates.size:
            break
        chord = np.searchsorted(
            kept, candidates
        )  # candidate lies between kept[chord-1], kept[chord]
        a, b = points[kept[chord - 1]], points[kept[chord]]
        d = b - a
        rel = points[candidates] - a
        length = np.hypot(d[:, 0], d[:, 1])
        cross = np.abs(d[:, 0] * rel[:, 1] - d[:, 1] * rel[:, 0])
        distance = np.where(length > 0, cross / np.maximum(length, 1e-12), np.hypot(*rel.T))
        first = np.flatnonzero(np.r_[True, chord[1:] != chord[:-1]])
        worst = np.maximum.reduceat(distance, first)
        group = np.repeat(np.arange(first.size), np.diff(np.r_[first, chord.size]))
        hit = (distance == worst[group]) & (worst[group] > tolerance)
        if not hit.any():
            break
        _, chosen = np.unique(group[hit], return_index=True)
        keep[candidates[np.flatnonzero(hit)[chosen]]] = True
    return [points[a:b][keep[a:b]] for a, b in zip(starts, ends, strict=True)]


def _signed_area_rc(ring: np.ndarray) -> float:
    """Shoelace area of a (row, col) ring; < 0 for outlines find_contours traces with
    positive_orientation="high"."""
    rows, cols = ring[:, 0], ring[:, 1]  # closed: the last point repeats the first
    return 0.5 * float(np.dot(cols[:-1], rows[1:]) - np.dot(cols[1:], rows[:-1]))


def _area(ring: np.ndarray) -> float:
    """Unsigned shoelace area of an (x, y) ring."""
    x, y = ring[:, 0], ring[:, 1]  # closed: the last point repeats the first
    return 0.5 * abs(float(np.dot(x[:-1], y[1:]) - np.dot(x[1:], y[:-1])))


def _to_level0(ring_rc: np.ndarray, offset: tuple[int, int], class_map: ClassMap) -> np.ndarray:
    cell = class_map.cell_size_level0
    width, height = class_map.slide_dimensions
    x = class_map.origin_level0[0] + (ring_rc[:, 1] + offset[1] + 0.5) * cell
    y = class_map.origin_level0[1] + (ring_rc[:, 0] + offset[0] + 0.5) * cell
    ring = np.stack([np.clip(x, 0, width), np.clip(y, 0, height)], axis=1)
    if not np.array_equal(ring[0], ring[-1]):
        ring = np.vstack([ring, ring[:1]])
    return ring


def area_table(class_map: ClassMap, regions: list[Region]) -> list[dict[str, Any]]:
    """One row per class and "uncertain": ``class``, ``cells``, ``area_px2``, ``area_um2``
    (None without an mpp), ``share_of_tissue`` (0..1; 0 when the map has no tissue),
    ``regions`` (polygons kept) and ``region_area_um2`` (their area, None without an mpp)."""
    areas = class_map.cell_areas_px2()
    labels = class_map.labels
    per_label = np.bincount(
        labels.ravel(), weights=areas.ravel(), minlength=len(class_map.label_names)
    )
    cells = np.bincount(labels.ravel(), minlength=len(class_map.label_names))
    tissue = float(per_label[1:].sum())
    rows = []
    for label, name in enumerate(class_map.label_names[1:], start=1):
        kept = [r for r in regions if r.label == label]
        polygon_px2 = float(sum(r.area_px2 for r in kept))
        rows.append(
            {
                "class": name,
                "cells": int(cells[label]),
                "area_px2": float(per_label[label]),
                "area_um2": class_map.px2_to_um2(float(per_label[label])),
                "share_of_tissue": float(per_label[label] / tissue) if tissue > 0 else 0.0,
                "regions": len(kept),
                "region_area_um2": class_map.px2_to_um2(polygon_px2),
            }
        )
    return rows
