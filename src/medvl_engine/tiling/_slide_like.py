"""What tiling needs of a slide (:class:`SlideLike`) and the slide facts it reads: the mean
mpp when it is usable, and the slide's name for messages."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["SlideLike", "mean_mpp", "slide_label"]


class SlideLike(Protocol):
    """The part of ``medvl_engine.io.slide.Slide`` that tiling and feature extraction need."""

    mpp: tuple[float, float] | None
    level_downsamples: list[float]
    level_dimensions: list[tuple[int, int]]  # (width, height) of every pyramid level

    @property
    def dimensions(self) -> tuple[int, int]: ...

    def get_best_level_for_downsample(self, downsample: float) -> int: ...

    def read_region(
        self, location: tuple[int, int], level: int, size: tuple[int, int]
    ) -> np.ndarray: ...

    def thumbnail(self, max_px: int = 512) -> np.ndarray: ...


def mean_mpp(slide: SlideLike) -> float | None:
    """The slide's um/px, mean of x and y; None when it has none or one is not finite and > 0."""
    mpp = getattr(slide, "mpp", None)
    if mpp is None:
        return None
    values = [float(v) for v in (mpp if isinstance(mpp, (tuple, list)) else (mpp, mpp))]
    if not all(math.isfinite(v) and v > 0 for v in values):
        return None
    return float(np.mean(values))


def slide_label(slide: Any) -> str:
    """ "slide NAME" (its file name, never its folder) for messages, else "the slide"."""
    path = getattr(slide, "path", None)
    return f"slide {Path(path).name}" if path else "the slide"
