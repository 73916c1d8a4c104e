"""Where a DICOM whole-slide image lies in its slide coordinate system, and back.

A VL Whole Slide Microscopy image states its geometry in the slide coordinate system of its
Frame of Reference (millimetres): the Total Pixel Matrix Origin O (x, y, z), the Image
Orientation (Slide) (row direction r: the direction of increasing column index, column
direction c: increasing row index, unit 3-vectors) and the Pixel Spacing (row spacing
s_row, column spacing s_col in mm). A level-0 pixel position (x, y) (continuous, the origin
at the top-left corner of the total pixel matrix, QuPath's convention) maps to

    P(x, y) = O + x * s_col * r + y * s_row * c                      (slide mm)

and back by projecting P - O on r and c. The origin is read as the top-left corner of the
matrix, as pyramid levels and objects derived from them (highdicom's pyramids, converters)
share one origin whatever their pixel size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SlideGeometry"]


@dataclass(frozen=True)
class SlideGeometry:
    """A total pixel matrix in the slide coordinate system (see the module docstring).

    ``origin`` (x, y, z) mm; ``row_direction`` / ``column_direction`` unit 3-vectors;
    ``spacing`` (row spacing, column spacing) mm per pixel; ``size`` (columns, rows) pixels.
    """

    origin: tuple[float, float, float]
    row_direction: tuple[float, float, float]
    column_direction: tuple[float, float, float]
    spacing: tuple[float, float]
    size: tuple[int, int]
    frame_of_reference_uid: str = ""

    @classmethod
    def from_dataset(cls, dataset: Any) -> SlideGeometry | None:
        """The geometry a tiled image (source WSI, SEG, PM) states; None when any part is
        missing or not finite (an image without a slide frame of reference)."""
        try:
            origin_item = dataset.TotalPixelMatrixOriginSequence[0]
            x = float(origin_item.XOffsetInSlideCoordinateSystem)
            y = float(origin_item.YOffsetInSlideCoordinateSystem)
            z = float(origin_item.get("ZOffsetInSlideCoordinateSystem", 0.0) or 0.0)
            orientation = [float(v) for v in _orientation(dataset)]
            spacing = [float(v) for v in _spacing(dataset)]
            size = (int(dataset.TotalPixelMatrixColumns), int(dataset.TotalPixelMatrixRows))
        except (AttributeError, IndexError, KeyError, TypeError, ValueError):
            return None
        values = np.array([x, y, z, *orientation, *spacing], np.float64)
        if len(orientation) != 6 or len(spacing) != 2 or not np.all(np.isfinite(values)):
            return None
        if min(spacing) <= 0 or min(size) <= 0:
            return None
        row = np.array(orientation[:3])
        column = np.array(orientation[3:])
        if not (
            np.isclose(np.linalg.norm(row), 1.0, atol=1e-3)
            and np.isclose(np.linalg.norm(column), 1.0, atol=1e-3)
            and abs(float(row @ column)) < 1e-3
        ):
            return None
        return cls(
            origin=(x, y, z),
            row_direction=_triple(row),
            column_direction=_triple(column),
            spacing=(spacing[0], spacing[1]),
            size=size,
            frame_of_reference_uid=str(dataset.get("FrameOfReferenceUID", "")),
        )

    def to_slide(self, points_xy: np.ndarray) -> np.ndarray:
        """Pixel positions float [N, 2] (x, y) of this matrix -> slide mm float64 [N, 3]."""
        points = np.asarray(points_xy, np.float64).reshape(-1, 2)
        row = np.asarray(self.row_direction) * self.spacing[1]
        column = np.asarray(self.column_direction) * self.spacing[0]
        return np.asarray(self.origin) + points[:, :1] * row + points[:, 1:2] * column

    def to_pixels(self, points_mm: np.ndarray) -> np.ndarray:
        """Slide mm float [N, 3] (or [N, 2]: x, y on the slide plane) -> float64 [N, 2] (x, y)
        pixel positions of this matrix (the component off the image plane is dropped)."""
        points = np.asarray(points_mm, np.float64)
        points = points.reshape(-1, points.shape[-1] if points.ndim else 1)
        if points.shape[1] == 2:
            points = np.concatenate([points, np.full((len(points), 1), self.origin[2])], axis=1)
        offset = points - np.asarray(self.origin)
        x = offset @ np.asarray(self.row_direction) / self.spacing[1]
        y = offset @ np.asarray(self.column_direction) / self.spacing[0]
        return np.stack([x, y], axis=1)

    def placed_in(self, source: SlideGeometry) -> tuple[tuple[float, float], tuple[float, float]]:
        """Where this matrix lies in ``source``'s pixels: ((x, y) of its top-left corner,
        (width, height) of one of its pixels), both in source pixels."""
        corner = source.to_pixels(np.asarray([self.origin]))[0]
        return (
            (float(corner[0]), float(corner[1])),
            (self.spacing[1] / source.spacing[1], self.spacing[0] / source.spacing[0]),
        )


def _orientation(dataset: Any) -> Any:
    if "ImageOrientationSlide" in dataset:
        return dataset.ImageOrientationSlide
    shared = dataset.SharedFunctionalGroupsSequence[0]
    return shared.PlaneOrientationSlideSequence[0].ImageOrientationSlide


def _spacing(dataset: Any) -> Any:
    shared = dataset.SharedFunctionalGroupsSequence[0]
    return shared.PixelMeasuresSequence[0].PixelSpacing


def _triple(vector: np.ndarray) -> tuple[float, float, float]:
    first, second, third = (float(v) for v in vector)
    return first, second, third
