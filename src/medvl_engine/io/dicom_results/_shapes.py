"""Graphic data of SR, GSPS and ANN objects as shapes, and the labels shown beside them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["ShapeSink", "classify_outline", "ellipse_corners", "shape_label"]


def classify_outline(points: np.ndarray, closed: bool) -> tuple[str, np.ndarray]:
    """("rectangle" | "polygon" | "path", vertices [k, 2]) of a polyline (x, y); a closed
    polyline whose last vertex repeats the first drops the repeat."""
    points = np.asarray(points, np.float64).reshape(-1, 2)
    if len(points) > 2 and np.allclose(points[0], points[-1]):
        points, closed = points[:-1], True
    if not closed:
        return "path", points
    if len(points) == 4:
        xs, ys = np.unique(points[:, 0]), np.unique(points[:, 1])
        edges_axis_aligned = all(
            np.isclose(a[0], b[0]) or np.isclose(a[1], b[1])
            for a, b in zip(points, np.roll(points, -1, axis=0), strict=True)
        )
        if len(xs) == 2 and len(ys) == 2 and edges_axis_aligned:
            return "rectangle", points
    return "polygon", points


def ellipse_corners(points: np.ndarray, circle: bool = False) -> np.ndarray:
    """The 4 corners [4, 2] of the (possibly rotated) box of an ellipse given by its major
    then minor axis end points [4, 2], or of a circle given by centre and a perimeter point."""
    points = np.asarray(points, np.float64).reshape(-1, 2)
    if circle:
        centre = points[0]
        radius = float(np.linalg.norm(points[1] - points[0]))
        u, v = np.array([radius, 0.0]), np.array([0.0, radius])
    else:
        centre = points.mean(axis=0)
        u, v = (points[1] - points[0]) / 2.0, (points[3] - points[2]) / 2.0
    return np.stack([centre - u - v, centre + u - v, centre + u + v, centre - u + v])


def shape_label(name: str, values: Mapping[str, float]) -> str:
    """The text beside a shape: ``#rank score`` when it has a rank, else its name and first
    measurement (``mass 12.3``); names only when nothing was measured."""
    rank = next((v for k, v in values.items() if _is_rank(k)), None)
    others = [(k, v) for k, v in values.items() if not _is_rank(k)]
    if rank is not None and np.isfinite(rank):
        score = f" {others[0][1]:.3g}" if others and np.isfinite(others[0][1]) else ""
        return f"#{int(rank)}{score}"
    if others and np.isfinite(others[0][1]):
        return f"{name} {others[0][1]:.3g}".strip()
    return name


def _is_rank(name: str) -> bool:
    return "rank" in name.lower().split(" [")[0].split()


class ShapeSink:
    """Collects shapes by type, each with its label and measurements, for ResultShapes."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str, str], list[tuple[np.ndarray, str, dict[str, float]]]] = {}

    def add(
        self,
        group: str,
        shape_type: str,
        points: np.ndarray,
        label: str,
        values: Mapping[str, float] | None = None,
        source_uid: str = "",
    ) -> None:
        key = (group, shape_type, source_uid)
        self.groups.setdefault(key, []).append(
            (np.asarray(points, np.float64), label, dict(values or {}))
        )
