"""DICOM grayscale pipeline (rescale -> LINEAR window -> MONOCHROME1) per pixel vs by lookup table.

A 12-bit 4096 x 3328 mammogram-sized image in memory; prints both times and the
ratio table / per-pixel (lower is better) and checks that both give the same pixels.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from pydicom.dataset import Dataset

from medvl_engine.io.mammo._dicom_mammo import display_pixels

REPEATS = 3


def best_of(function) -> tuple[float, np.ndarray]:
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> int:
    rng = np.random.default_rng(0)
    stored = rng.integers(0, 4096, size=(4096, 3328), dtype=np.uint16)
    dataset = Dataset()
    dataset.RescaleSlope, dataset.RescaleIntercept = 1.0, -10.0
    dataset.WindowCenter, dataset.WindowWidth = 2100, 3000
    path = Path("bench.dcm")
    as_float = stored.astype(np.float64)  # float input takes the per-pixel path

    def per_pixel():
        return display_pixels(path, dataset, as_float, "MONOCHROME1", 0)[0]

    def table():
        return display_pixels(path, dataset, stored, "MONOCHROME1", 0)[0]

    slow, expected = best_of(per_pixel)
    fast, pixels = best_of(table)
    assert np.allclose(pixels, expected, atol=1e-6), "table and per-pixel results differ"
    print(
        f"VOI pipeline 4096x3328 12-bit: per pixel {slow * 1e3:7.1f} ms | lookup table "
        f"{fast * 1e3:7.1f} ms | ratio {fast / slow:4.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
