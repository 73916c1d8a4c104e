"""Putting a result's coordinates on its source image's level-0 pixels."""

from __future__ import annotations

from typing import Any

import numpy as np

from medvl_engine.io.dicom_results.geometry import SlideGeometry
from medvl_engine.io.dicom_results.source import DicomImageSource

__all__ = ["Placement"]


class Placement:
    """Converts 2D image coordinates, slide (3D) coordinates and image grids of a result to
    (x, y) px of ``source``'s level 0; without a source 2D coordinates stay in the px of the
    image they reference and slide-based ones fall back to micrometres (``units`` "um")."""

    def __init__(self, source: DicomImageSource | None) -> None:
        self.source = source
        self.notes: list[str] = []
        self.units = "px"

    @property
    def level0_uid(self) -> str:
        return (
            self.source.sop_instance_uids[0]
            if self.source and self.source.sop_instance_uids
            else ""
        )

    def image_points(self, points_xy: np.ndarray, referenced_uid: str) -> np.ndarray:
        """(x, y) px of the image ``referenced_uid`` -> level-0 px (a coarser pyramid level
        of the source is scaled by the ratio of the level sizes)."""
        points = np.asarray(points_xy, np.float64).reshape(-1, 2)
        source = self.source
        if source is None or referenced_uid not in source.level_sizes:
            return points
        columns, rows = source.level_sizes[referenced_uid]
        if referenced_uid == self.level0_uid or not columns or not rows:
            return points
        scaled: np.ndarray = points * np.array([source.size[0] / columns, source.size[1] / rows])
        return scaled

    def slide_points(self, points_mm: np.ndarray) -> np.ndarray:
        """Slide coordinates [N, 3] or [N, 2] mm -> level-0 px, or um (x, y) when unplaced."""
        points = np.asarray(points_mm, np.float64)
        if self.source is not None and self.source.geometry is not None:
            return self.source.geometry.to_pixels(points)
        self._unplaced("its slide coordinates are shown in micrometres, not over the slide")
        return points.reshape(-1, points.shape[-1])[:, :2] * 1000.0

    def grid(
        self, dataset: Any, shape: tuple[int, int]
    ) -> tuple[tuple[float, float], tuple[float, float]]:
        """(origin (x, y), pixel size (sx, sy)) of an image grid of ``shape`` (rows, cols)."""
        geometry = SlideGeometry.from_dataset(dataset)
        source = self.source
        if geometry is not None:
            if source is not None and source.geometry is not None:
                return geometry.placed_in(source.geometry)
            self._unplaced(
                "it is placed in micrometres from its own corner, assumed to be the slide's"
            )
            return (0.0, 0.0), (geometry.spacing[1] * 1000.0, geometry.spacing[0] * 1000.0)
        if source is not None and source.size[0] and source.size[1]:
            return (0.0, 0.0), (source.size[0] / shape[1], source.size[1] / shape[0])
        return (0.0, 0.0), (1.0, 1.0)

    def _unplaced(self, consequence: str) -> None:
        self.units = "um"
        note = f"its source image was not found, so {consequence}"
        if note not in self.notes:
            self.notes.append(note)
