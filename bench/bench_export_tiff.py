"""Heatmap TIFF over a whole slide: pixel-centre sampling vs a per-cell block repeat, one run.

A 100,000 x 80,000 px slide at 0.25 um/px scored on 448-px patches (223 x 178 cells, 60% of
them tissue) is written as the aligned heatmap TIFF (downsample 32 = 8 um per pixel,
3,125 x 2,500 px). Measured side by side, median of interleaved rounds:
  sampling   heatmap_on_slide: each pixel takes the cell holding its centre (runs of pixels
             in one cell repeated as blocks); any integer downsample, any grid origin
  repeat     the reference that only works when d divides the cell and the origin: paste the
             grid into a slide-sized cell canvas and np.repeat each cell into d-px blocks
  write      the whole write_heatmap_tiff (RGBA, all pyramid levels, deflate, atomic rename)
Prints both canvas timings, their ratio (sampling / repeat: the price of handling any
downsample and origin; both stay a few ms, small beside the write) and the write time.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from medvl_engine.export import heatmap_on_slide, write_heatmap_tiff

SLIDE = (100_000, 80_000)
MPP = (0.25, 0.25)
CELL = 448
ORIGIN = (448, 896)
DOWNSAMPLE = 32


def _heatmap() -> SimpleNamespace:
    rng = np.random.default_rng(0)
    rows = (SLIDE[1] - ORIGIN[1]) // CELL
    cols = (SLIDE[0] - ORIGIN[0]) // CELL
    grid = rng.random((rows, cols), dtype=np.float32)
    grid[rng.random(grid.shape) > 0.6] = np.nan
    return SimpleNamespace(
        grid=grid,
        origin_level0=ORIGIN,
        cell_size_level0=CELL,
        value_range=(0.0, 1.0),
        prompt="tumor",
        mode="cosine",
        normalize="none",
    )


def _repeat(heatmap: SimpleNamespace) -> np.ndarray:
    cells_x, cells_y = math.ceil(SLIDE[0] / CELL), math.ceil(SLIDE[1] / CELL)
    canvas = np.full((cells_y, cells_x), np.nan, np.float32)
    col0, row0 = ORIGIN[0] // CELL, ORIGIN[1] // CELL
    rows, cols = heatmap.grid.shape
    canvas[row0 : row0 + rows, col0 : col0 + cols] = heatmap.grid
    k = CELL // DOWNSAMPLE
    blocks = np.repeat(np.repeat(canvas, k, axis=0), k, axis=1)
    return blocks[: math.ceil(SLIDE[1] / DOWNSAMPLE), : math.ceil(SLIDE[0] / DOWNSAMPLE)]


def main() -> int:
    heatmap = _heatmap()
    sampled = heatmap_on_slide(heatmap, SLIDE, DOWNSAMPLE)
    np.testing.assert_array_equal(sampled, _repeat(heatmap))  # same canvas, bit for bit
    times: dict[str, list[float]] = {"sampling": [], "repeat": [], "write": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(11):
            for name, run in (
                ("sampling", lambda: heatmap_on_slide(heatmap, SLIDE, DOWNSAMPLE)),
                ("repeat", lambda: _repeat(heatmap)),
            ):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        for _ in range(3):
            start = time.perf_counter()
            path = write_heatmap_tiff(
                Path(folder) / "heat.tiff",
                heatmap,
                slide_dimensions=SLIDE,
                mpp=MPP,
                downsample=DOWNSAMPLE,
            )
            times["write"].append(time.perf_counter() - start)
        size_mb = path.stat().st_size / 1e6
    median = {name: statistics.median(values) for name, values in times.items()}
    height, width = sampled.shape
    print(f"slide {SLIDE[0]} x {SLIDE[1]} px, TIFF {width} x {height} px at downsample 32")
    print(f"canvas by pixel-centre sampling  {median['sampling'] * 1e3:7.1f} ms")
    print(f"canvas by per-cell block repeat  {median['repeat'] * 1e3:7.1f} ms")
    print(f"ratio sampling / repeat          {median['sampling'] / median['repeat']:7.2f}x")
    print(f"whole RGBA pyramid TIFF write    {median['write'] * 1e3:7.1f} ms ({size_mb:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
