"""Reading a 2048x2048 level-0 region through Slide.levels vs single-threaded tifffile decoding.

For a JPEG SVS and a JPEG 2000 SVS (both written here with tifffile/imagecodecs,
4096x4096 px, 240 px tiles, Aperio description so tiffslide reads them as SVS),
and the real CMU-1-Small-Region.svs when ../shared/sample-data is present,
prints the time of

  baseline: read + decode every tile touching the region with tifffile, one thread;
  medvl:    np.asarray(slide.levels[0][y:y+2048, x:x+2048]) (dask, default scheduler),
  naive:    the same through da.from_zarr over tiffslide's zarr store (for comparison),

and the wall-time ratio medvl / baseline (the target is <= 1.0), best of 3-25
interleaved runs (more for fast cases, so that a busy machine still yields a fair
minimum). The CPU-time ratio shows the reader's own overhead, which is what
remains when other processes keep the second core busy.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from pathlib import Path

import dask.array as da
import numpy as np
import tifffile

from medvl_engine.io.slide import open_slide

REGION = 2048
MIN_REPEATS, MAX_REPEATS = 3, 25
SECONDS_PER_CASE = 4.0
SAMPLE_DATA = Path(__file__).resolve().parents[2] / "shared" / "sample-data"
SAMPLE_SVS = SAMPLE_DATA / "slides" / "CMU-1-Small-Region.svs"


def tissue_like(size: int, seed: int) -> np.ndarray:
    """[size, size, 3] uint8: smooth pink blobs plus grain (compresses like H&E, not like noise)."""
    rng = np.random.default_rng(seed)
    coarse = rng.random((size // 64 + 1, size // 64 + 1, 3))
    smooth = np.kron(coarse, np.ones((64, 64, 1)))[:size, :size]
    grain = rng.normal(0, 0.06, (size, size, 1))
    base = np.array([0.85, 0.55, 0.75]) * (0.6 + 0.4 * smooth) + grain
    return np.clip(base * 255, 0, 255).astype(np.uint8)


def write_svs(path: Path, compression: str, size: int = 4096, tile: int = 240) -> Path:
    description = (
        f"Aperio Image Library v12.0.0 \r\n{size}x{size} [0,0 {size}x{size}] ({tile}x{tile}) "
        f"{compression.upper()}/RGB Q=80|AppMag = 20|MPP = 0.5000"
    )
    kwargs = {"compressionargs": {"level": 80}} if compression == "jpeg" else {}
    with tifffile.TiffWriter(path) as writer:
        writer.write(
            tissue_like(size, seed=1),
            tile=(tile, tile),
            compression=compression,
            photometric="rgb",
            description=description,
            **kwargs,
        )
    return path


class BaselineDecoder:
    """Reads and decodes, in one thread, every tile overlapping a region, with tifffile."""

    def __init__(self, path: Path) -> None:
        self.tif = tifffile.TiffFile(path)
        self.page = self.tif.pages[0]
        self.args = {"_fullsize": True}
        if self.page.jpegtables is not None:
            self.args["jpegtables"] = self.page.jpegtables

    def read(self, x: int, y: int, size: int) -> np.ndarray:
        page, handle, decode = self.page, self.tif.filehandle, self.page.decode
        tile_h, tile_w = page.tilelength, page.tilewidth
        across = math.ceil(page.imagewidth / tile_w)
        out = np.empty((size, size, 3), np.uint8)
        for row in range(y // tile_h, (y + size - 1) // tile_h + 1):
            for col in range(x // tile_w, (x + size - 1) // tile_w + 1):
                index = row * across + col
                handle.seek(page.dataoffsets[index])
                data = handle.read(page.databytecounts[index])
                tile = decode(data, index, **self.args)[0].reshape(tile_h, tile_w, 3)
                ty, tx = row * tile_h, col * tile_w
                y0, y1 = max(y, ty), min(y + size, ty + tile_h)
                x0, x1 = max(x, tx), min(x + size, tx + tile_w)
                out[y0 - y : y1 - y, x0 - x : x1 - x] = tile[y0 - ty : y1 - ty, x0 - tx : x1 - tx]
        return out

    def close(self) -> None:
        self.tif.close()


def timed(function) -> tuple[float, float, np.ndarray]:
    """(wall seconds, CPU seconds of this process, result) of one call."""
    start, cpu_start = time.perf_counter(), time.process_time()
    result = function()
    return time.perf_counter() - start, time.process_time() - cpu_start, result


def compare(label: str, path: Path, x: int, y: int) -> float:
    """Best-of-n seconds for both readers, alternating so both see the same machine load."""
    baseline = BaselineDecoder(path)
    slide = open_slide(path)
    try:
        zarr_level = da.from_zarr(slide_zarr(path))
        base_times, our_times, base_cpu, our_cpu, zarr_times = [], [], [], [], []
        first = timed(lambda: baseline.read(x, y, REGION))[0]
        repeats = max(MIN_REPEATS, min(MAX_REPEATS, int(SECONDS_PER_CASE / (3 * first))))
        for _ in range(repeats):
            naive = zarr_level[y : y + REGION, x : x + REGION]
            zarr_times.append(timed(lambda naive=naive: np.asarray(naive))[0])
            seconds, cpu, expected = timed(lambda: baseline.read(x, y, REGION))
            base_times.append(seconds)
            base_cpu.append(cpu)
            region = slide.levels[0][y : y + REGION, x : x + REGION]
            seconds, cpu, pixels = timed(lambda region=region: np.asarray(region))
            our_times.append(seconds)
            our_cpu.append(cpu)
            assert np.array_equal(pixels, expected), "medvl pixels differ from tifffile's"
    finally:
        baseline.close()
        slide.close()
    base, ours, naive = min(base_times), min(our_times), min(zarr_times)
    ratio = ours / base
    print(
        f"{label:<30} tifffile 1 thread {base * 1e3:7.1f} ms | medvl {ours * 1e3:7.1f} ms"
        f" = {ratio:4.2f}x (CPU {min(our_cpu) / min(base_cpu):4.2f}x) | da.from_zarr "
        f"{naive * 1e3:7.1f} ms = {naive / base:4.2f}x"
    )
    return ratio


def slide_zarr(path: Path):
    """Level 0 of tiffslide's zarr store (the naive way: dask chunk = one native tile)."""
    import tiffslide

    return tiffslide.TiffSlide(path).zarr_group["0"]


def main() -> int:
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        jpeg = write_svs(Path(tmp) / "jpeg.svs", "jpeg")
        j2k = write_svs(Path(tmp) / "j2k.svs", "jpeg2000")
        ratios.append(compare("JPEG SVS 4096 (240 tiles)", jpeg, 1000, 700))
        ratios.append(compare("JPEG2000 SVS 4096 (240 tiles)", j2k, 1000, 700))
    if SAMPLE_SVS.exists():
        ratios.append(compare("CMU-1-Small-Region.svs", SAMPLE_SVS, 100, 500))
    print(f"worst wall ratio {max(ratios):.2f}x (target <= 1.00x)")
    print(f"machine load while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
