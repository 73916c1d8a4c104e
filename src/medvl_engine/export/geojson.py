"""QuPath-readable GeoJSON: heatmap tiles, iso-contours and boxes in level-0 px (origin top-left).

Every feature has a Polygon or MultiPolygon geometry with closed rings, and properties with
``objectType`` ("annotation" or "detection"), ``classification`` {"name", "color": [r, g, b]},
``measurements`` {name: value}, the prompt, and the model that made it (``model``, plus
``notice`` for a demo model). A heatmap tile's classification follows its score: the score
range is cut into equal bins (or at one threshold) named in the class, e.g.
``"tumor: score 0.2 to 0.4"``, coloured by the shared colour map at the bin centre, and the
score is the QuPath measurement ``score``. The collection carries a top-level ``"medvl"``
object naming the model, the notice, the colour map, its limits and the class bins.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.colormaps import apply_colormap, display_limits, is_signed, resolve_colormap
from medvl_engine.common.atomic import atomic_write
from medvl_engine.common.model_label import model_metadata

__all__ = [
    "DEFAULT_SCORE_BINS",
    "boxes_geojson",
    "score_classes",
    "heatmap_contours_geojson",
    "heatmap_tiles_geojson",
    "write_geojson",
]

OBJECT_TYPES = ("annotation", "detection", "tile")
DEFAULT_SCORE_BINS = 5


def _rectangle(x0: float, y0: float, x1: float, y1: float) -> list[list[float]]:
    """Closed ring of an axis-aligned box, clockwise in image coordinates (y down)."""
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]


def _feature(geometry: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "Feature", "geometry": geometry, "properties": properties}


def _provenance(model: str | Path | None) -> dict[str, str]:
    """Feature properties naming the model: ``model``, and ``notice`` for a demo model."""
    metadata = model_metadata(model)
    return {key: value for key, value in metadata.items() if value}


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


def score_classes(
    scores: np.ndarray,
    limits: tuple[float, float],
    prompt: str,
    colormap: str,
    *,
    n_bins: int = DEFAULT_SCORE_BINS,
    threshold: float | None = None,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Class of each score [N] -> (class index int64 [N], classes).

    With ``threshold`` t: two classes, ``"{prompt}: score < t"`` and ``"{prompt}: score >= t"``.
    Otherwise ``n_bins`` equal bins over ``limits`` (low, high); bin b holds scores in
    [low + b w, low + (b + 1) w) with w = (high - low) / n_bins, scores outside the limits
    fall in the end bins. Each class is ``{"name", "low", "high", "color": [r, g, b]}``, the
    colour taken from ``colormap`` at the class's centre (clipped to the limits).
    """
    scores = np.asarray(scores, dtype=np.float64)
    low, high = float(limits[0]), float(limits[1])
    span = high - low if high > low else 1.0
    if threshold is not None:
        t = float(threshold)
        index = (np.nan_to_num(scores, nan=-np.inf) >= t).astype(np.int64)
        bounds = [(-np.inf, t), (t, np.inf)]
        names = [f"{prompt}: score < {t:.3g}", f"{prompt}: score >= {t:.3g}"]
        centres = [(low + min(t, high)) / 2, (max(t, low) + high) / 2]
    else:
        if n_bins < 1:
            raise ValueError(f"the number of score bins must be at least 1, got {n_bins}")
        edges = low + span * np.arange(n_bins + 1) / n_bins
        position = np.floor((np.nan_to_num(scores, nan=low) - low) / span * n_bins)
        index = np.clip(position, 0, n_bins - 1).astype(np.int64)
        bounds = [(float(edges[b]), float(edges[b + 1])) for b in range(n_bins)]
        names = [f"{prompt}: score {a:.3g} to {b:.3g}" for a, b in bounds]
        centres = [(a + b) / 2 for a, b in bounds]
    colours = apply_colormap((np.asarray(centres) - low) / span, colormap)
    classes = [
        {
            "name": name,
            "low": None if not np.isfinite(a) else float(a),
            "high": None if not np.isfinite(b) else float(b),
            "color": [int(c) for c in colour],
        }
        for name, (a, b), colour in zip(names, bounds, colours, strict=True)
    ]
    return index, classes


def _score_limits(
    scores: np.ndarray, value_range: tuple[float, float] | None, mode: str | None
) -> tuple[tuple[float, float], bool]:
    """(colour limits, signed) of a heatmap: symmetric around 0 when the map is signed."""
    finite = scores[np.isfinite(scores)]
    if value_range is None:
        value_range = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    signed = is_signed(mode, value_range)
    return display_limits(value_range, signed), signed


def heatmap_tiles_geojson(
    coords: np.ndarray,
    patch_size_level0: int,
    scores: np.ndarray,
    prompt: str,
    *,
    value_range: tuple[float, float] | None = None,
    min_score: float | None = None,
    object_type: str = "detection",
    colormap: str | None = None,
    mode: str | None = None,
    model: str | Path | None = None,
    threshold: float | None = None,
    n_bins: int = DEFAULT_SCORE_BINS,
) -> dict[str, Any]:
    """One square per patch: coords [N, 2] (x, y) level-0 px top-left, scores [N].

    Each tile carries its score (``measurements.score`` and ``score``), a colour from
    ``colormap`` (None / "auto": viridis, or blue-white-red with limits symmetric around 0
    for a signed map) over ``value_range`` (default: the scores' min-max), and a
    classification from its score (:func:`score_classes`: ``n_bins`` bins, or ``threshold``).
    NaN scores and scores below ``min_score`` are left out.
    """
    scores = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(scores)
    (low, high), signed = _score_limits(scores, value_range, mode)
    name = resolve_colormap(colormap, signed)
    span = high - low if high > low else 1.0
    colours = apply_colormap((scores - low) / span, name)
    class_index, classes = score_classes(
        scores, (low, high), prompt, name, n_bins=n_bins, threshold=threshold
    )
    provenance = _provenance(model)
    keep = finite if min_score is None else finite & (scores >= min_score)
    features = []
    for index in np.flatnonzero(keep):
        x0, y0 = (float(v) for v in coords[index])
        ring = _rectangle(x0, y0, x0 + patch_size_level0, y0 + patch_size_level0)
        score = float(scores[index])
        tile_class = classes[class_index[index]]
        features.append(
            _feature(
                {"type": "Polygon", "coordinates": [ring]},
                _properties(
                    object_type,
                    tile_class["name"],
                    tile_class["color"],
                    {"score": score},
                    color=colours[index].tolist(),
                    score=score,
                    prompt=prompt,
                    **provenance,
                ),
            )
        )
    metadata = {
        **model_metadata(model),
        "prompt": prompt,
        "mode": mode,
        "colormap": name,
        "color_limits": [low, high],
        "classification": {
            "by": "score threshold" if threshold is not None else "score bins",
            "measurement": "score",
            "classes": classes,
        },
    }
    return {"type": "FeatureCollection", "features": features, "medvl": metadata}


def heatmap_contours_geojson(
    grid: np.ndarray,
    origin_level0: tuple[float, float],
    cell_size_level0: float,
    prompt: str,
    levels: Sequence[float],
    *,
    object_type: str = "annotation",
    colormap: str | None = None,
    value_range: tuple[float, float] | None = None,
    mode: str | None = None,
    model: str | Path | None = None,
) -> dict[str, Any]:
    """Iso-contour regions of a score grid [rows, cols], one MultiPolygon per level.

    A region holds the cells scoring >= level (NaN cells count as below every level); its
    outer rings and holes come from marching squares (skimage.measure.find_contours) on cell
    centres, mapped to level-0 px: x = origin_x + (col + 0.5) * cell, y likewise. Its class is
    ``"{prompt}: score >= level"``, coloured by the shared colour map at the level.
    """
    from skimage.measure import find_contours, points_in_poly

    values = np.asarray(grid, dtype=np.float64)
    finite = np.isfinite(values)
    floor = (values[finite].min() if finite.any() else 0.0) - 1.0
    padded = np.pad(np.where(finite, values, floor), 1, constant_values=floor)
    (low, high), signed = _score_limits(values, value_range, mode)
    name = resolve_colormap(colormap, signed)
    span = high - low if high > low else 1.0
    provenance = _provenance(model)
    features = []
    for level in levels:
        contours = find_contours(padded, float(level), positive_orientation="high")
        outers: list[np.ndarray] = []
        holes: list[np.ndarray] = []
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
        colour = apply_colormap(np.array([(level - low) / span]), name)[0].tolist()
        class_name = f"{prompt}: score >= {level:.3g}"
        features.append(
            _feature(
                {"type": "MultiPolygon", "coordinates": polygons},
                _properties(
                    object_type,
                    class_name,
                    colour,
                    {"level": float(level)},
                    name=class_name,
                    level=float(level),
                    prompt=prompt,
                    **provenance,
                ),
            )
        )
    metadata = {
        **model_metadata(model),
        "prompt": prompt,
        "mode": mode,
        "colormap": name,
        "color_limits": [low, high],
        "classification": {"by": "score levels", "levels": [float(v) for v in levels]},
    }
    return {"type": "FeatureCollection", "features": features, "medvl": metadata}


def boxes_geojson(
    boxes: np.ndarray,
    scores: np.ndarray | None = None,
    name: str = "top patch",
    *,
    prompt: str = "",
    object_type: str = "annotation",
    color: Sequence[int] = (255, 200, 0),
    model: str | Path | None = None,
) -> dict[str, Any]:
    """Boxes [N, 4] as (x0, y0, x1, y1) level-0 px -> rectangles with rank and score."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    provenance = _provenance(model)
    features = []
    for rank, box in enumerate(boxes, start=1):
        measurements: dict[str, float] = {"rank": rank}
        extra: dict[str, Any] = {"rank": rank, "name": f"{name} {rank}"}
        if scores is not None:
            measurements["score"] = float(scores[rank - 1])
            extra["score"] = float(scores[rank - 1])
        if prompt:
            extra["prompt"] = prompt
        extra.update(provenance)
        features.append(
            _feature(
                {"type": "Polygon", "coordinates": [_rectangle(*box.tolist())]},
                _properties(object_type, name, color, measurements, **extra),
            )
        )
    return {"type": "FeatureCollection", "features": features, "medvl": model_metadata(model)}


def write_geojson(path: str | Path, *collections: dict[str, Any]) -> Path:
    """Write one FeatureCollection (the features of all ``collections``) atomically.

    The top-level ``"medvl"`` objects of the collections are merged (the first one's keys
    win), so the file keeps the model, notice and classification of the heatmap it holds.
    """
    merged: dict[str, Any] = {
        "type": "FeatureCollection",
        "features": [f for collection in collections for f in collection["features"]],
    }
    metadata: dict[str, Any] = {}
    for collection in reversed(collections):
        metadata.update(collection.get("medvl") or {})
    if metadata:
        merged["medvl"] = metadata
    text = json.dumps(merged, separators=(",", ":"))
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def _signed_area(ring_rc: np.ndarray) -> float:
    """Shoelace area of a (row, col) ring; < 0 for the outer rings positive_orientation gives."""
    rows, cols = ring_rc[:, 0], ring_rc[:, 1]
    return 0.5 * float(np.sum(cols * np.roll(rows, -1) - np.roll(cols, -1) * rows))


def _to_level0(ring_rc: np.ndarray, origin: tuple[float, float], cell: float) -> list[list[float]]:
    x = origin[0] + (ring_rc[:, 1] + 0.5) * cell
    y = origin[1] + (ring_rc[:, 0] + 0.5) * cell
    ring: list[list[float]] = np.round(np.stack([x, y], axis=1), 2).tolist()
    if ring[0] != ring[-1]:
        ring.append(ring[0])
    return ring
