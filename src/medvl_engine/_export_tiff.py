"""The heatmap alone as a tiled pyramidal RGB TIFF that open_slide (and QuPath) read back."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine._atomic import atomic_write
from medvl_engine._colormap import apply_colormap

__all__ = ["heatmap_rgb_on_slide", "write_heatmap_tiff"]

_TILE = 256
_TARGET_UM_PER_PX = 8.0


def heatmap_rgb_on_slide(
    heatmap: Any,
    slide_dimensions: tuple[int, int] | None,
    px_per_cell: int,
    colormap: str = "jet",
) -> np.ndarray:
    """Coloured heatmap uint8 [H, W, 3] aligned with the slide's top-left, white where NaN.

    Output pixel (r, c) covers level-0 px x in [c * cell / k, (c + 1) * cell / k) with k =
    ``px_per_cell``; the image spans the whole slide when its dimensions are known.
    """
    grid = np.asarray(heatmap.grid, np.float32)
    cell = heatmap.cell_size_level0
    col0, row0 = (int(math.floor(v / cell)) for v in heatmap.origin_level0)
    if slide_dimensions is not None:
        cols = max(math.ceil(slide_dimensions[0] / cell), col0 + grid.shape[1])
        rows = max(math.ceil(slide_dimensions[1] / cell), row0 + grid.shape[0])
    else:
        cols, rows = col0 + grid.shape[1], row0 + grid.shape[0]
    canvas = np.full((rows, cols), np.nan, dtype=np.float32)
    canvas[row0 : row0 + grid.shape[0], col0 : col0 + grid.shape[1]] = grid
    low, high = heatmap.value_range
    span = high - low if high > low else 1.0
    rgb = apply_colormap((canvas - low) / span, colormap)
    rgb[~np.isfinite(canvas)] = 255
    return np.repeat(np.repeat(rgb, px_per_cell, axis=0), px_per_cell, axis=1)


def write_heatmap_tiff(
    path: str | Path,
    heatmap: Any,
    *,
    slide_dimensions: tuple[int, int] | None = None,
    mpp: tuple[float, float] | None = None,
    px_per_cell: int | None = None,
    colormap: str = "jet",
) -> Path:
    """Write the coloured heatmap as a tiled, deflate-compressed pyramidal TIFF, atomically.

    With the slide's ``mpp`` (x, y) um/px the file records its own resolution, mpp * cell / k,
    so it overlays the slide in any viewer that honours physical size. ``px_per_cell`` k
    defaults to the value giving about 8 um per pixel (8 without an mpp).
    """
    import tifffile

    cell = heatmap.cell_size_level0
    if px_per_cell is None:
        px_per_cell = max(1, math.ceil(cell * mpp[0] / _TARGET_UM_PER_PX)) if mpp else 8
    image = heatmap_rgb_on_slide(heatmap, slide_dimensions, px_per_cell, colormap)
    levels = [image]
    while min(levels[-1].shape[:2]) >= 2 * _TILE:
        levels.append(_halve(levels[-1]))
    description = json.dumps(
        {
            "medvl": "heatmap",
            "prompt": heatmap.prompt,
            "value_range": [float(v) for v in heatmap.value_range],
            "colormap": colormap,
            "level0_px_per_pixel": cell / px_per_cell,
        }
    )

    def write(temporary: Path) -> None:
        with tifffile.TiffWriter(temporary) as tif:
            for index, level in enumerate(levels):
                extra: dict[str, Any] = {}
                if mpp is not None:
                    scale = image.shape[1] / level.shape[1]
                    um_x = mpp[0] * cell / px_per_cell * scale
                    um_y = mpp[1] * cell / px_per_cell * scale
                    extra["resolution"] = (1e4 / um_x, 1e4 / um_y)
                    extra["resolutionunit"] = "CENTIMETER"
                if index == 0:
                    extra["subifds"] = len(levels) - 1
                    extra["description"] = description
                else:
                    extra["subfiletype"] = 1
                tif.write(
                    level,
                    tile=(_TILE, _TILE),
                    photometric="rgb",
                    compression="zlib",
                    metadata=None,
                    **extra,
                )

    return atomic_write(path, write)


def _halve(image: np.ndarray) -> np.ndarray:
    """2 x 2 mean downsample of uint8 [H, W, 3] (an odd last row/column is dropped)."""
    h, w = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
    total = image[:h:2, :w:2].astype(np.uint16) + image[1:h:2, :w:2] + image[:h:2, 1:w:2]
    total += image[1:h:2, 1:w:2]
    return ((total + 2) // 4).astype(np.uint8)
