"""The heatmap as a tiled pyramidal TIFF that lies exactly over its slide.

The TIFF covers the slide's whole level-0 extent at an integer downsample d: pixel (x, y) of
the full-resolution page covers level-0 px [x * d, (x + 1) * d) x [y * d, (y + 1) * d), so
its top-left corner is level-0 (x * d, y * d) and the page is ceil(W / d) x ceil(H / d) for a
W x H slide. Its resolution tags say slide mpp * d, and the ImageDescription (JSON) repeats
the downsample and origin, so QuPath or any viewer overlays it on the slide without a manual
offset. A pixel takes the value of the heatmap cell holding its centre; pixels with no cell
(no tissue, outside the patch grid) are transparent (RGBA, alpha 0) or NaN (float32 scores).
Coarser pyramid levels (SubIFDs) are sampled the same way at downsample d * 2^l.
The description also names the model that made the heatmap (``model``) and, for a demo
model, carries its ``notice``; RGBA files name their colour map and its limits.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.colormaps import apply_colormap, display_limits, is_signed, resolve_colormap
from medvl_engine.common.atomic import atomic_write
from medvl_engine.common.model_label import model_metadata
from medvl_engine.errors import CorruptFileError, ExportError

if TYPE_CHECKING:
    from medvl_engine.heatmap import Heatmap

__all__ = [
    "TIFF_VALUES",
    "heatmap_on_slide",
    "heatmap_tiff_downsample",
    "read_heatmap_tiff_description",
    "write_heatmap_tiff",
]

TIFF_VALUES = ("rgba", "scores")
"""rgba: colour-mapped uint8 [H, W, 4] for viewing; scores: float32 [H, W] for analysis."""

_TILE = 256
_TARGET_UM_PER_PX = 8.0
_MAX_PIXELS = 1 << 29


def heatmap_tiff_downsample(heatmap: Heatmap, mpp: tuple[float, float] | None = None) -> int:
    """Level-0 px per TIFF pixel: about 8 um per pixel (1/8 cell without an mpp).

    Prefers the largest divisor of gcd(cell, origin_x, origin_y) not above that target, so
    every cell edge falls on a pixel edge; when such a divisor is under half the target it
    takes the target itself (cell edges then land within d level-0 px of their place).
    """
    cell = int(heatmap.cell_size_level0)
    origin_x, origin_y = (int(v) for v in heatmap.origin_level0)
    target = _TARGET_UM_PER_PX / float(mpp[0]) if mpp else cell / 8
    target = max(1.0, target)
    exact = max(d for d in _divisors(math.gcd(cell, origin_x, origin_y)) if d <= target)
    return exact if 2 * exact >= target else int(target)


def heatmap_on_slide(
    heatmap: Heatmap, extent: tuple[int, int] | None, downsample: int
) -> np.ndarray:
    """Heatmap values float32 [ceil(H / d), ceil(W / d)] over the slide, NaN where no cell.

    ``extent`` is the slide's level-0 (width, height); None covers (0, 0) to the grid's
    far corner. Pixel (x, y) holds the cell containing level-0 ((x + 0.5) d, (y + 0.5) d).
    """
    grid = np.asarray(heatmap.grid, np.float32)
    padded = np.pad(grid, ((0, 1), (0, 1)), constant_values=np.nan)  # index -1: no cell
    return _gather(padded, heatmap, _extent(heatmap, extent), downsample)


def write_heatmap_tiff(
    path: str | Path,
    heatmap: Heatmap,
    *,
    slide_dimensions: tuple[int, int] | None = None,
    mpp: tuple[float, float] | None = None,
    downsample: int | None = None,
    values: str = "rgba",
    colormap: str | None = None,
    model: str | Path | None = None,
) -> Path:
    """Write the heatmap as a tiled, deflate-compressed pyramidal TIFF aligned with the slide.

    ``slide_dimensions`` (width, height) level-0 px and ``mpp`` (x, y) um per level-0 px are
    the slide's; ``downsample`` d (level-0 px per TIFF pixel, integer) defaults to
    :func:`heatmap_tiff_downsample`. ``values`` "rgba" writes uint8 [H, W, 4] colour-mapped
    over the heatmap's value range, alpha 0 where no cell; "scores" writes the float32 values,
    NaN where no cell. ``colormap`` None / "auto" takes viridis, or blue-white-red over limits
    symmetric around 0 for a signed map (contrast, or a range crossing 0). ``model`` (name or
    folder) is named in the ImageDescription. The file's mpp is mpp * d. Written atomically.
    """
    import tifffile

    path = Path(path)
    if values not in TIFF_VALUES:
        raise ExportError(
            f"Cannot write {path.name}: TIFF values '{values}' are unknown; use "
            f"{' or '.join(TIFF_VALUES)}.",
            path,
        )
    if downsample is None:
        downsample = heatmap_tiff_downsample(heatmap, mpp)
    if int(downsample) != downsample or downsample < 1:
        raise ExportError(
            f"Cannot write {path.name}: the TIFF downsample must be a whole number of level-0 "
            f"pixels >= 1, got {downsample}.",
            path,
        )
    downsample = int(downsample)
    extent = _extent(heatmap, slide_dimensions)
    width, height = -(-extent[0] // downsample), -(-extent[1] // downsample)
    if width * height > _MAX_PIXELS:
        raise ExportError(
            f"Cannot write {path.name}: {width} x {height} pixels at downsample {downsample} "
            "is too large; choose a larger downsample.",
            path,
        )
    grid = np.asarray(heatmap.grid, np.float32)
    cells = np.pad(grid, ((0, 1), (0, 1)), constant_values=np.nan)  # index -1: no cell
    signed = is_signed(getattr(heatmap, "mode", None), heatmap.value_range)
    limits = display_limits(heatmap.value_range, signed)
    colormap = resolve_colormap(colormap, signed)
    if values == "rgba":
        cells = _rgba(cells, limits, colormap)  # coloured once per cell
    level_downsamples = [downsample]  # halve until a level's shorter side is under 2 tiles
    while min(-(-extent[0] // level_downsamples[-1]), -(-extent[1] // level_downsamples[-1])) >= (
        2 * _TILE
    ):
        level_downsamples.append(level_downsamples[-1] * 2)
    description = _description(
        heatmap, slide_dimensions, mpp, downsample, values, colormap, limits, model
    )
    level0_bytes = width * height * 4  # RGBA uint8 or float32: 4 bytes per pixel

    def write(temporary: Path) -> None:
        with tifffile.TiffWriter(temporary, bigtiff=level0_bytes * 2 > 2**31) as tif:
            for index, level_downsample in enumerate(level_downsamples):
                pixels = _gather(cells, heatmap, extent, level_downsample)
                extra: dict[str, Any] = {}
                if mpp is not None:
                    um_x, um_y = mpp[0] * level_downsample, mpp[1] * level_downsample
                    extra["resolution"] = (1e4 / um_x, 1e4 / um_y)
                    extra["resolutionunit"] = "CENTIMETER"
                if index == 0:
                    extra["subifds"] = len(level_downsamples) - 1
                    extra["description"] = description
                else:
                    extra["subfiletype"] = 1
                if values == "rgba":
                    extra.update(photometric="rgb", extrasamples="unassalpha")
                else:
                    extra["photometric"] = "minisblack"
                tif.write(pixels, tile=(_TILE, _TILE), compression="zlib", metadata=None, **extra)

    return atomic_write(path, write, what="heatmap TIFF")


def read_heatmap_tiff_description(path: str | Path) -> dict[str, Any]:
    """The JSON ImageDescription of a heatmap TIFF written by :func:`write_heatmap_tiff`."""
    import tifffile

    path = Path(path)
    try:
        with tifffile.TiffFile(path) as tif:
            page = tif.pages[0]
            text = page.description if isinstance(page, tifffile.TiffPage) else ""
        description: dict[str, Any] = json.loads(text)
        if description.get("medvl") != "heatmap":
            raise ValueError("no medvl heatmap description")
    except FileNotFoundError as error:
        raise ExportError(f"Heatmap TIFF {path} does not exist; check the path.", path) from error
    except (OSError, ValueError, AttributeError, tifffile.TiffFileError) as error:
        raise CorruptFileError(
            f"{path.name} is not a heatmap TIFF written by medvl ({error}); write it again "
            "with `medvl heatmap --out FILE.tiff`.",
            path,
        ) from error
    return description


def _description(
    heatmap: Heatmap,
    slide_dimensions: tuple[int, int] | None,
    mpp: tuple[float, float] | None,
    downsample: int,
    values: str,
    colormap: str,
    limits: tuple[float, float],
    model: str | Path | None,
) -> str:
    return json.dumps(
        {
            "medvl": "heatmap",
            **model_metadata(model),
            "values": values,
            "prompt": heatmap.prompt,
            "mode": getattr(heatmap, "mode", None),
            "normalize": getattr(heatmap, "normalize", None),
            "value_range": [float(v) for v in heatmap.value_range],
            "colormap": colormap if values == "rgba" else None,
            "color_limits": [float(v) for v in limits] if values == "rgba" else None,
            "downsample": downsample,
            "origin_level0": [0, 0],
            "pixel_to_level0": f"(x, y) -> ({downsample} * x, {downsample} * y)",
            "slide_dimensions": list(slide_dimensions) if slide_dimensions else None,
            "slide_mpp": [float(v) for v in mpp] if mpp else None,
            "mpp": [float(v) * downsample for v in mpp] if mpp else None,
            "grid_origin_level0": [int(v) for v in heatmap.origin_level0],
            "cell_size_level0": int(heatmap.cell_size_level0),
        }
    )


def _extent(heatmap: Heatmap, slide_dimensions: tuple[int, int] | None) -> tuple[int, int]:
    """Level-0 (width, height) the TIFF covers: the slide's, else up to the grid's far corner."""
    if slide_dimensions is not None:
        return int(slide_dimensions[0]), int(slide_dimensions[1])
    rows, cols = np.shape(heatmap.grid)
    cell = int(heatmap.cell_size_level0)
    return int(heatmap.origin_level0[0]) + cols * cell, int(heatmap.origin_level0[1]) + rows * cell


def _rgba(scores: np.ndarray, value_range: tuple[float, float], colormap: str) -> np.ndarray:
    """float32 [H, W] -> uint8 [H, W, 4]: colour over ``value_range``; NaN -> white, alpha 0."""
    low, high = (float(v) for v in value_range)
    span = high - low if high > low else 1.0
    rgba = np.empty((*scores.shape, 4), np.uint8)
    rgba[..., :3] = apply_colormap((scores - low) / span, colormap)
    finite = np.isfinite(scores)
    rgba[..., :3][~finite] = 255
    rgba[..., 3] = np.where(finite, 255, 0)
    return rgba


def _gather(
    cells: np.ndarray, heatmap: Heatmap, extent: tuple[int, int], downsample: int
) -> np.ndarray:
    """Per-pixel copy [ceil(H / d), ceil(W / d), ...] of ``cells`` [rows + 1, cols + 1, ...]
    (the grid padded with one "no cell" row and column) at downsample d."""
    cell = int(heatmap.cell_size_level0)
    origin_x, origin_y = (int(v) for v in heatmap.origin_level0)
    width, height = -(-int(extent[0]) // downsample), -(-int(extent[1]) // downsample)
    row_cells, row_counts = _runs(
        _cell_of_pixel(height, downsample, origin_y, cell, len(cells) - 1)
    )
    col_cells, col_counts = _runs(
        _cell_of_pixel(width, downsample, origin_x, cell, cells.shape[1] - 1)
    )
    distinct = cells.take(row_cells, axis=0).take(col_cells, axis=1)  # one entry per run
    return np.repeat(np.repeat(distinct, col_counts, axis=1), row_counts, axis=0)


def _runs(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run-length form of int64 [n]: the value of each run of equal neighbours and its length."""
    starts = np.flatnonzero(np.diff(index, prepend=index[0] - 1))
    return index[starts], np.diff(starts, append=index.size)


def _cell_of_pixel(
    n_pixels: int, downsample: int, origin: int, cell: int, n_cells: int
) -> np.ndarray:
    """Grid index int64 [n_pixels] of the cell holding each pixel centre; -1 where none.

    Centres are compared at twice their value so the arithmetic stays in integers.
    """
    doubled_centres = (2 * np.arange(n_pixels, dtype=np.int64) + 1) * downsample
    index = (doubled_centres - 2 * origin) // (2 * cell)
    index[(index < 0) | (index >= n_cells)] = -1
    return index


def _divisors(number: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(number) + 1) if number % d == 0]
    return small + [number // d for d in small]
