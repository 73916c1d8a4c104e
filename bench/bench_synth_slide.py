"""Synthetic slide writing: texture atlas painting vs full-size class textures, in one run.

Measured side by side on the same label map and stain (median of interleaved rounds):
  atlas    make_synthetic_slide's painter: one 1024-px periodic texture per class, copied
           tile by tile where the label map says so
  naive    each present class rendered at the full slide size, then composited by label
and, separately, the whole make_synthetic_slide call (label map + painting + pyramid + JPEG)
against writing the same pixels with tifffile alone (the floor set by encoding).
Usage: bench_synth_slide.py [SIDE] (default 2048; the target for 4096 is < 3 s in total).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tifffile

from medvl_engine.synthetic import make_synthetic_slide
from medvl_engine.synthetic._slides import paint_slide
from medvl_engine.synthetic._tissue import density_to_rgb, random_stain, tissue_density

ROUNDS = 3


def _naive(labels: np.ndarray, ds: int, size: tuple[int, int], rng, stain, mpp) -> np.ndarray:
    width, height = size
    full = np.repeat(np.repeat(labels, ds, 0), ds, 1)[:height, :width]
    image = np.empty((height, width, 3), np.uint8)
    for cid in np.unique(labels):
        texture = density_to_rgb(*tissue_density(int(cid), (height, width), rng, mpp), stain, rng)
        where = full == cid
        image[where] = texture[where]
    return image


def main() -> None:
    side = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        truth = make_synthetic_slide(folder / "warm.tif", seed=1, size=(side, side))
        labels, ds = truth.label_map, truth.label_downsample
        stain = random_stain(np.random.default_rng(0))
        atlas_s, naive_s, total_s, floor_s = [], [], [], []
        for round_ in range(ROUNDS):
            start = time.perf_counter()
            image = paint_slide(labels, ds, (side, side), np.random.default_rng(round_), stain, 0.5)
            atlas_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            _naive(labels, ds, (side, side), np.random.default_rng(round_), stain, 0.5)
            naive_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            make_synthetic_slide(folder / f"s{round_}.tif", seed=round_, size=(side, side))
            total_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            tifffile.imwrite(
                folder / f"raw{round_}.tif",
                image,
                tile=(256, 256),
                photometric="rgb",
                compression="jpeg",
            )
            floor_s.append(time.perf_counter() - start)
    atlas, naive = statistics.median(atlas_s), statistics.median(naive_s)
    total, floor = statistics.median(total_s), statistics.median(floor_s)
    print(f"slide {side}x{side} px, {len(np.unique(labels))} classes, median of {ROUNDS} rounds")
    print(
        f"painting: atlas {atlas:.3f} s, naive full-size textures {naive:.3f} s, "
        f"naive/atlas = {naive / atlas:.1f}x"
    )
    print(
        f"make_synthetic_slide {total:.3f} s vs tifffile write of level 0 alone {floor:.3f} s, "
        f"ratio {total / floor:.1f}x"
    )


if __name__ == "__main__":
    main()
