"""A whole-slide heatmap as a DICOM Parametric Map pyramid vs the pyramidal TIFF export.

A 100,000 x 80,000 px slide at 0.25 um/px scored on 224-px patches (447 x 358 cells over the
slide, 60% of them tissue, the rest NaN) is written, side by side in interleaved rounds:
  pmap pyramid   write_heatmap_parametric_map_pyramid: float32, TILED_SPARSE, one pixel per
                 cell, halved until one 256 x 256 tile holds the map (what `--pyramid` writes)
  pmap 1 level   write_heatmap_parametric_map (what `--out map.dcm` writes)
  TIFF rgba      write_heatmap_tiff, the default export (colour with alpha, about 8 um per
                 pixel: downsample 32, 3,125 x 2,500 px, all pyramid levels, deflate)
  TIFF scores    write_heatmap_tiff(values="scores"): the float32 scores at that downsample
The DICOM source is a synthetic VL Whole Slide Microscopy level 0 whose header describes the
whole slide (total pixel matrix, spacing, origin, orientation, frame of reference); the
writers read only the header. The first DICOM write (importing highdicom) is left out.
Prints the median time of each, the ratios to the TIFF exports and the file sizes.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydicom

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.dicom_wsi import write_dicom_wsi  # noqa: E402

from medvl_engine.export import write_heatmap_tiff  # noqa: E402
from medvl_engine.export.dicom import (  # noqa: E402
    write_heatmap_parametric_map,
    write_heatmap_parametric_map_pyramid,
)
from medvl_engine.heatmap import Heatmap  # noqa: E402

SLIDE = (100_000, 80_000)  # (width, height) level-0 px
MPP = 0.25
CELL = 224
DOWNSAMPLE = 32
ROUNDS = 3


def _source(folder: Path) -> Path:
    """A level-0 header describing the whole 100k x 80k slide (pixel data of one tile)."""
    (path,) = write_dicom_wsi(folder, np.full((64, 64, 3), 230, np.uint8), mpp=MPP, levels=1)
    dataset = pydicom.dcmread(path)
    dataset.TotalPixelMatrixColumns, dataset.TotalPixelMatrixRows = SLIDE
    dataset.ImagedVolumeWidth = SLIDE[0] * MPP / 1000.0
    dataset.ImagedVolumeHeight = SLIDE[1] * MPP / 1000.0
    dataset.save_as(path, enforce_file_format=True)
    return path


def _heatmap() -> Heatmap:
    rng = np.random.default_rng(0)
    rows, cols = SLIDE[1] // CELL, SLIDE[0] // CELL  # whole patches: 357 x 446
    grid = rng.random((rows, cols), dtype=np.float32)
    grid[rng.random(grid.shape) > 0.6] = np.nan
    return Heatmap(
        grid=grid,
        scores=grid[np.isfinite(grid)],
        origin_level0=(0, 0),
        cell_size_level0=CELL,
        scale=(CELL * MPP, CELL * MPP),
        translate=(0.0, 0.0),
        units="um",
        prompt="tumor",
        value_range=(0.0, 1.0),
        metadata={"encoder": "medvl-demo"},
    )


def _size_mb(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 1e6


def _tiff(path: Path, heatmap: Heatmap, values: str) -> list[Path]:
    """The heatmap as a pyramidal TIFF of ``values`` ("rgba" or "scores") over the slide."""
    return [
        write_heatmap_tiff(
            path,
            heatmap,
            slide_dimensions=SLIDE,
            mpp=(MPP, MPP),
            downsample=DOWNSAMPLE,
            values=values,
        )
    ]


def main() -> int:
    heatmap = _heatmap()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = _source(folder / "wsi")
        out = folder / "out"
        out.mkdir()
        runs: dict[str, Callable[[], list[Path]]] = {
            "pmap pyramid": lambda: write_heatmap_parametric_map_pyramid(
                out / "pyr.dcm", heatmap, source
            ),
            "pmap 1 level": lambda: [
                write_heatmap_parametric_map(out / "one.dcm", heatmap, source)
            ],
            "TIFF rgba": lambda: _tiff(out / "rgba.tiff", heatmap, "rgba"),
            "TIFF scores": lambda: _tiff(out / "scores.tiff", heatmap, "scores"),
        }
        start = time.perf_counter()
        write_heatmap_parametric_map(out / "warm.dcm", heatmap, source)
        first = time.perf_counter() - start
        times: dict[str, list[float]] = {name: [] for name in runs}
        written: dict[str, list[Path]] = {}
        for _ in range(ROUNDS):
            for name, run in runs.items():
                start = time.perf_counter()
                written[name] = run()
                times[name].append(time.perf_counter() - start)
        median = {name: statistics.median(values) for name, values in times.items()}
        levels = [pydicom.dcmread(p, stop_before_pixels=True) for p in written["pmap pyramid"]]
        shapes = ", ".join(
            f"{d.TotalPixelMatrixColumns} x {d.TotalPixelMatrixRows}" for d in levels
        )
        rows, cols = heatmap.grid.shape
        slide = f"slide {SLIDE[0]} x {SLIDE[1]} px at {MPP} um/px"
        print(f"{slide}, heatmap {cols} x {rows} patches of {CELL} px")
        print(f"first DICOM write (imports highdicom)  {first:7.2f} s (left out)")
        print(f"median of {ROUNDS} interleaved rounds:")
        for name in runs:
            print(
                f"  {name:<13} {median[name] * 1e3:8.1f} ms  "
                f"{_size_mb(written[name]):7.2f} MB in {len(written[name])} file(s)"
            )
        print(f"pmap pyramid levels: {shapes}")
        for tiff in ("TIFF rgba", "TIFF scores"):
            print(
                f"ratio pmap pyramid / {tiff:<11} "
                f"{median['pmap pyramid'] / median[tiff]:6.2f}x time, "
                f"{_size_mb(written['pmap pyramid']) / _size_mb(written[tiff]):6.3f}x size"
            )
        print(
            f"ratio pmap pyramid / pmap 1 level  "
            f"{median['pmap pyramid'] / median['pmap 1 level']:6.2f}x time"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
