"""QuPath-readable GeoJSON: heatmap tiles, iso-contours and boxes in level-0 px (origin top-left).

Every feature has a Polygon or MultiPolygon geometry with closed rings, and properties with
``objectType`` ("annotation" or "detection"), ``classification`` {"name", "color": [r, g, b]},
``measurements`` {name: value}, and the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine._atomic import atomic_write
from medvl_engine._colormap import apply_colormap

__all__ = [
    "boxes_geojson",
    "heatmap_contours_geojson",
    "heatmap_tiles_geojson",
    "write_geojson",
]

OBJECT_TYPES = ("annotation", "detection", "tile")
_CLASS_COLOR = [220, 40, 40]


def _rectangle(x0: float, y0: float, x1: float, y1: float) -> list[list[float]]:
    """Closed ring of an axis-aligned box, clockwise in image coordinates (y down)."""
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]


def _feature(geometry: dict, properties: dict) -> dict:
    return {"type": "Feature", "geometry": geometry, "properties": properties}


def _properties(
    object_type: str,
    class_name: str,
    class_color: Sequence[int],
    measurements: dict[str, float],
    **extra: Any,
) -> dict[str, Any]:
    if object_type not in OBJECT_TYPES:
        raise ValueError(f"object_type must be one of {OBJECT_TYPES}, got {object_type!r}")
    return {
        "objectType": object_type,
        "classification": {"name": class_name, "color": [int(c) for c in class_color]},
        "measurements": {key: float(value) for key, value in measurements.items()},
        **extra,
    }


def heatmap_tiles_geojson(
    coords: np.ndarray,
    patch_size_level0: int,
    scores: np.ndarray,
    prompt: str,
    *,
    value_range: tuple[float, float] | None = None,
    min_score: float | None = None,
    object_type: str = "detection",
    colormap: str = "jet",
) -> dict:
    """One square per patch: coords [N, 2] (x, y) level-0 px top-left, scores [N].

    Each tile carries its score (``measurements.score`` and ``score``) and a colour from
    ``colormap`` over ``value_range`` (default: the scores' min-max). NaN scores and scores
    below ``min_score`` are left out.
    """
    scores = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(scores)
    if value_range is None:
        low, high = (scores[finite].min(), scores[finite].max()) if finite.any() else (0.0, 1.0)
    else:
        low, high = value_range
    span = high - low if high > low else 1.0
    colours = apply_colormap((scores - low) / span, colormap)
    keep = finite if min_score is None else finite & (scores >= min_score)
    features = []
    for index in np.flatnonzero(keep):
        x0, y0 = (float(v) for v in coords[index])
        ring = _rectangle(x0, y0, x0 + patch_size_level0, y0 + patch_size_level0)
        score = float(scores[index])
        features.append(
            _feature(
                {"type": "Polygon", "coordinates": [ring]},
                _properties(
                    object_type,
                    prompt,
                    _CLASS_COLOR,
                    {"score": score},
                    color=colours[index].tolist(),
                    score=score,
                    prompt=prompt,
                ),
            )
        )
    return {"type": "FeatureCollection", "features": features}


def heatmap_contours_geojson(
    grid: np.ndarray,
    origin_level0: tuple[float, float],
    cell_size_level0: float,
    prompt: str,
    levels: Sequence[float],
    *,
    object_type: str = "annotation",
    colormap: str = "jet",
    value_range: tuple[float, float] | None = None,
) -> dict:
    """Iso-contour regions of a score grid [rows, cols], one MultiPolygon per level.

    A region holds the cells scoring >= level (NaN cells count as below every level); its
    outer rings and holes come from marching squares (skimage.measure.find_contours) on cell
    centres, mapped to level-0 px: x = origin_x + (col + 0.5) * cell, y likewise.
    """
    from skimage.measure import find_contours, points_in_poly

    values = np.asarray(grid, dtype=np.float64)
    finite = np.isfinite(values)
    floor = (values[finite].min() if finite.any() else 0.0) - 1.0
    padded = np.pad(np.where(finite, values, floor), 1, constant_values=floor)
    low, high = value_range or (
        (values[finite].min(), values[finite].max()) if finite.any() else (0.0, 1.0)
    )
    span = high - low if high > low else 1.0
    features = []
    for level in levels:
        contours = find_contours(padded, float(level), positive_orientation="high")
        outers, holes = [], []
        for contour in contours:
            if len(contour) < 4:
                continue
            ring_rc = contour - 1.0  # undo the padding
            area = _signed_area(ring_rc)
            (outers if area < 0 else holes).append(ring_rc)
        polygons = []
        for outer in outers:
            own_holes = [h for h in holes if points_in_poly(h[:1], outer)[0]]
            rings = [outer, *own_holes]
            polygons.append([_to_level0(r, origin_level0, cell_size_level0) for r in rings])
        if not polygons:
            continue
        colour = apply_colormap(np.array([(level - low) / span]), colormap)[0].tolist()
        features.append(
            _feature(
                {"type": "MultiPolygon", "coordinates": polygons},
                _properties(
                    object_type,
                    prompt,
                    colour,
                    {"level": float(level)},
                    name=f"{prompt} >= {level:.3g}",
                    level=float(level),
                    prompt=prompt,
                ),
            )
        )
    return {"type": "FeatureCollection", "features": features}


def boxes_geojson(
    boxes: np.ndarray,
    scores: np.ndarray | None = None,
    name: str = "top patch",
    *,
    prompt: str = "",
    object_type: str = "annotation",
    color: Sequence[int] = (255, 200, 0),
) -> dict:
    """Boxes [N, 4] as (x0, y0, x1, y1) level-0 px -> rectangles with rank and score."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    features = []
    for rank, box in enumerate(boxes, start=1):
        measurements = {"rank": rank}
        extra: dict[str, Any] = {"rank": rank, "name": f"{name} {rank}"}
        if scores is not None:
            measurements["score"] = float(scores[rank - 1])
            extra["score"] = float(scores[rank - 1])
        if prompt:
            extra["prompt"] = prompt
        features.append(
            _feature(
                {"type": "Polygon", "coordinates": [_rectangle(*box.tolist())]},
                _properties(object_type, name, color, measurements, **extra),
            )
        )
    return {"type": "FeatureCollection", "features": features}


def write_geojson(path: str | Path, *collections: dict) -> Path:
    """Write one FeatureCollection (the features of all ``collections``) atomically."""
    merged = {
        "type": "FeatureCollection",
        "features": [f for collection in collections for f in collection["features"]],
    }
    text = json.dumps(merged, separators=(",", ":"))
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def _signed_area(ring_rc: np.ndarray) -> float:
    """Shoelace area of a (row, col) ring; < 0 for the outer rings positive_orientation gives."""
    rows, cols = ring_rc[:, 0], ring_rc[:, 1]
    return 0.5 * float(np.sum(cols * np.roll(rows, -1) - np.roll(cols, -1) * rows))


def _to_level0(ring_rc: np.ndarray, origin: tuple[float, float], cell: float) -> list[list[float]]:
    x = origin[0] + (ring_rc[:, 1] + 0.5) * cell
    y = origin[1] + (ring_rc[:, 0] + 0.5) * cell
    ring = np.round(np.stack([x, y], axis=1), 2).tolist()
    if ring[0] != ring[-1]:
        ring.append(ring[0])
    return ring
