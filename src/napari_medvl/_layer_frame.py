"""The world frame every MedVL layer shares, and the generic builders drawn in it.

World frame (the one every slide layer shares): micrometres when the slide has
an mpp, else level-0 pixels, origin at the top-left corner of the slide. A
level-0 pixel (col, row) covers ``[col, col + 1) x [row, row + 1)`` in level-0 px,
so an image layer whose pixel centres napari puts at integer data coordinates
gets a half-pixel translate; boxes in level-0 px (x0, y0, x1, y1) map to world
by a plain multiplication with the mpp. Mammograms live in source-image pixels,
each view shifted right by ``offset_x`` so that views sit side by side.

Every builder returns ``(data, kwargs, layer_type)``, the tuple napari readers return and
``napari.layers.Layer.create(*tuple)`` takes; nothing here needs a viewer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "LayerData",
    "WorldFrame",
    "boxes_layer",
    "grid_image_layer",
    "layer_units",
]

LayerData = tuple[Any, dict[str, Any], str]


@dataclass(frozen=True)
class WorldFrame:
    """Map from a source image's pixel frame to napari world coordinates.

    ``world (y, x) = (offset_y + y_px * scale_y, offset_x + x_px * scale_x)`` where
    (x_px, y_px) are pixel-edge coordinates (level-0 px for slides, source px
    for mammograms). ``units`` is "um" or "px".
    """

    scale_y: float = 1.0
    scale_x: float = 1.0
    offset_y: float = 0.0
    offset_x: float = 0.0
    units: str = "px"

    def to_world(self, points_xy: np.ndarray) -> np.ndarray:
        """Points [N, 2] (x, y) in source px -> [N, 2] (y, x) in world units."""
        points = np.asarray(points_xy, dtype=np.float64).reshape(-1, 2)
        world_y = self.offset_y + points[:, 1] * self.scale_y
        world_x = self.offset_x + points[:, 0] * self.scale_x
        return np.stack([world_y, world_x], axis=1)

    def image_transform(
        self, step_y: float = 1.0, step_x: float = 1.0
    ) -> dict[str, tuple[float, float]]:
        """napari ``scale``/``translate`` for an image whose pixel is step_y x step_x source px.

        The image's pixel (0, 0) covers source px [0, step) on both axes, so its
        centre (napari's data coordinate 0) sits at half a step.
        """
        scale = (step_y * self.scale_y, step_x * self.scale_x)
        translate = (self.offset_y + scale[0] / 2.0, self.offset_x + scale[1] / 2.0)
        return {"scale": scale, "translate": translate}

    def as_dict(self) -> dict[str, Any]:
        return {
            "scale_y": self.scale_y,
            "scale_x": self.scale_x,
            "offset_y": self.offset_y,
            "offset_x": self.offset_x,
            "units": self.units,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> WorldFrame:
        return cls(**{key: values[key] for key in cls.__dataclass_fields__ if key in values})


def layer_units(frame: WorldFrame) -> tuple[str, str]:
    """napari layer units for a frame, so the scale bar reads um on slides with an mpp."""
    return ("um", "um") if frame.units == "um" else ("pixel", "pixel")


def boxes_layer(
    boxes_xyxy: np.ndarray,
    scores: Sequence[float] | np.ndarray,
    frame: WorldFrame,
    name: str,
    edge_color: str = "yellow",
    text_format: str = "#{rank} {score:.2f}",
    extra_features: dict[str, Sequence[Any]] | None = None,
    ranks: Sequence[int] | None = None,
) -> LayerData:
    """Rectangles for boxes [N, 4] (x0, y0, x1, y1) in the frame's source px.

    Returns a shapes layer whose rectangles are [N, 4, 2] (y, x) world corners,
    with features ``rank`` (1 = best), ``score`` and the text ``text_format``.
    Boxes are drawn in the order given; ranks follow descending score unless
    ``ranks`` are given.
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    score_array = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(score_array) != len(boxes):
        raise ValueError(f"{len(boxes)} boxes but {len(score_array)} scores")
    if ranks is None:
        order = np.argsort(-score_array, kind="stable")
        rank_array = np.empty(len(boxes), dtype=np.int64)
        rank_array[order] = np.arange(1, len(boxes) + 1)
    else:
        rank_array = np.asarray(ranks, dtype=np.int64).reshape(-1)
    rectangles = []
    for x0, y0, x1, y1 in boxes:
        corners_xy = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
        rectangles.append(frame.to_world(corners_xy))
    features: dict[str, Any] = {"rank": rank_array, "score": score_array}
    for key, values in (extra_features or {}).items():
        features[key] = list(values)
    kwargs = {
        "name": name,
        "shape_type": "rectangle",
        "edge_color": edge_color,
        "face_color": "transparent",
        "edge_width": max(frame.scale_x, frame.scale_y) * 4.0,
        "units": layer_units(frame),
        "features": features,
        "text": {"string": text_format, "color": edge_color, "anchor": "upper_left", "size": 9},
        "metadata": {"boxes_xyxy": boxes, "world_frame": frame.as_dict()},
    }
    return rectangles, kwargs, "shapes"


def grid_image_layer(
    grid: np.ndarray,
    frame: WorldFrame,
    cell_size_px: float | tuple[float, float],
    origin_px: tuple[float, float] = (0.0, 0.0),
    name: str = "heatmap",
    colormap: str = "turbo",
    opacity: float = 0.5,
    contrast_limits: tuple[float, float] | None = None,
    blending: str = "translucent",
    metadata: dict[str, Any] | None = None,
) -> LayerData:
    """Image layer for a score grid [rows, cols] laid over a source image.

    Cell (row, col) covers source px x in [ox + col * sx, ox + (col + 1) * sx)
    and y likewise, with ``origin_px`` = (ox, oy) and ``cell_size_px`` = s or
    (sx, sy). NaN cells (no tissue) stay transparent.
    """
    values = np.asarray(grid, dtype=np.float32)
    if values.ndim != 2:
        raise ValueError(f"score grid must be 2-D [rows, cols], got shape {values.shape}")
    if isinstance(cell_size_px, (tuple, list, np.ndarray)):
        step_x, step_y = float(cell_size_px[0]), float(cell_size_px[1])
    else:
        step_x = step_y = float(cell_size_px)
    shifted = WorldFrame(
        scale_y=frame.scale_y,
        scale_x=frame.scale_x,
        offset_y=frame.offset_y + origin_px[1] * frame.scale_y,
        offset_x=frame.offset_x + origin_px[0] * frame.scale_x,
        units=frame.units,
    )
    if contrast_limits is None:
        finite = values[np.isfinite(values)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        contrast_limits = (low, high if high > low else low + 1.0)
    kwargs = {
        "name": name,
        "colormap": colormap,
        "opacity": opacity,
        "blending": blending,
        "contrast_limits": tuple(float(v) for v in contrast_limits),
        "interpolation2d": "nearest",
        "units": layer_units(frame),
        "metadata": {**(metadata or {}), "world_frame": shifted.as_dict()},
        **shifted.image_transform(step_y, step_x),
    }
    return values, kwargs, "image"
