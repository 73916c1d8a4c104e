"""What a slide backend (TIFF, DICOM) hands to :func:`medvl_engine.io.slide.open_slide`.

A backend opens the file and finds its levels and metadata; ``open_slide`` builds the
:class:`~medvl_engine.io.slide.Slide` from these parts, so no backend needs the Slide class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["SlideParts"]


class SlideParts:
    """What a slide backend found: per-level pixel sources and slide metadata."""

    def __init__(self) -> None:
        self.sources: list[Any] = []
        self.tile_sizes: list[tuple[int, int]] = []
        self.mpp: tuple[float, float] | None = None
        self.vendor = "generic-tiff"
        self.objective_power: float | None = None
        self.properties: dict[str, Any] = {}
        self.private_properties: dict[str, Any] = {}
        self.associated: Mapping[str, np.ndarray] = {}
        self.tiled = True
        self.closers: list[Callable[[], None]] = []
