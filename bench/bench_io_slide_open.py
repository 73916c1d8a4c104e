"""Opening a 100,000 x 100,000 px slide vs reading its metadata with tifffile.

Writes a BigTIFF Aperio SVS of 100k x 100k px (38,416 JPEG tiles of 512 px, all
the same small tile so the file stays ~100 MB) in a temp dir, then prints the
best-of-5 time of

  tags:     tifffile.TiffFile(path) and the first page's tile offsets and counts;
  metadata: tiffslide.TiffSlide(path) with its properties and level dimensions;
  medvl:    open_slide(path) (levels as dask arrays, mpp, vendor; no pixel decoded),

and the ratio medvl / metadata. Opening must cost about what reading metadata does.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import imagecodecs
import numpy as np
import tifffile

from medvl_engine.io.slide import open_slide

SIDE = 100_000
TILE = 512
REPEATS = 5


def write_big_svs(path: Path) -> Path:
    tile = np.full((TILE, TILE, 3), (230, 200, 220), np.uint8)
    encoded = imagecodecs.jpeg8_encode(tile, level=80)
    count = (-(-SIDE // TILE)) ** 2
    description = (
        f"Aperio Image Library v12.0.0 \r\n{SIDE}x{SIDE} [0,0 {SIDE}x{SIDE}] ({TILE}x{TILE}) "
        "JPEG/RGB Q=80|AppMag = 40|MPP = 0.2500"
    )
    with tifffile.TiffWriter(path, bigtiff=True) as writer:
        writer.write(
            (encoded for _ in range(count)),
            shape=(SIDE, SIDE, 3),
            dtype=np.uint8,
            tile=(TILE, TILE),
            compression="jpeg",
            photometric="rgb",
            description=description,
        )
    return path


def read_metadata(path: Path) -> int:
    with tifffile.TiffFile(path) as tif:
        page = tif.pages[0]
        return len(page.dataoffsets) + len(page.databytecounts)


def read_slide_metadata(path: Path) -> int:
    import tiffslide

    with tiffslide.TiffSlide(path) as slide:
        return len(slide.properties) + len(slide.level_dimensions)


def open_with_medvl(path: Path) -> tuple[int, int]:
    with open_slide(path) as slide:
        return slide.dimensions


def best(function, path: Path) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        function(path)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        path = write_big_svs(Path(folder) / "big.svs")
        open_with_medvl(path)  # first call pays the imports (tiffslide, dask)
        tags = best(read_metadata, path)
        metadata = best(read_slide_metadata, path)
        medvl = best(open_with_medvl, path)
        size_mb = path.stat().st_size / 1e6
    print(
        f"open {SIDE}x{SIDE} SVS ({size_mb:.0f} MB): tifffile tags + tile offsets "
        f"{tags * 1e3:5.1f} ms | tiffslide metadata (properties, levels) {metadata * 1e3:5.1f} ms"
        f" | open_slide {medvl * 1e3:5.1f} ms = {medvl / metadata:4.2f}x the metadata read"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
