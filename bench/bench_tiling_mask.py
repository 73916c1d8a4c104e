"""Tissue masking and patch grids: cost against reading the thumbnail, and the closing shortcut.

Measured side by side in one run on a synthetic 4096x4096 slide (median of interleaved rounds):
  thumbnail     slide.thumbnail(1024) alone: the pixels every mask needs
  tissue_mask   the whole mask (saturation, Otsu, hysteresis, pen ink, closing, holes, specks)
  patch_grid    the mask plus a 448-px lattice with per-patch tissue fractions
  closing       the coarse-grid distance-transform closing used by tissue_mask vs
                scipy.ndimage.binary_closing with the exact disk, with their agreement (IoU)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import ndimage

from medvl_engine.io.slide import open_slide
from medvl_engine.synthetic import make_synthetic_slide
from medvl_engine.tiling import patch_grid, tissue_mask
from medvl_engine.tiling._mask import closing

ROUNDS = 3
RADIUS_PX = 12.5  # 50 um at 4 um per mask px


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        truth = make_synthetic_slide(Path(scratch) / "bench.tif", seed=4, size=(4096, 4096))
        with open_slide(truth.path) as slide:
            thumb_s, mask_s, grid_s = [], [], []
            for _ in range(ROUNDS):
                thumb_s.append(_timed(lambda: slide.thumbnail(1024))[0])
                elapsed, (mask, _) = _timed(lambda: tissue_mask(slide))
                mask_s.append(elapsed)
                grid_s.append(_timed(lambda: patch_grid(slide))[0])
    offsets = np.arange(-int(RADIUS_PX), int(RADIUS_PX) + 1)
    disk = offsets[:, None] ** 2 + offsets[None, :] ** 2 <= RADIUS_PX**2
    noisy = mask & (np.random.default_rng(0).uniform(size=mask.shape) > 0.3)
    fast_s, exact_s = [], []
    pad = len(offsets)
    for _ in range(ROUNDS):
        elapsed, fast = _timed(lambda: closing(noisy, RADIUS_PX))
        fast_s.append(elapsed)
        elapsed, exact = _timed(
            lambda: ndimage.binary_closing(np.pad(noisy, pad), structure=disk)[pad:-pad, pad:-pad]
        )
        exact_s.append(elapsed)
    iou = (fast & exact).sum() / max((fast | exact).sum(), 1)
    thumb, full, grid = (statistics.median(v) for v in (thumb_s, mask_s, grid_s))
    fast_m, exact_m = statistics.median(fast_s), statistics.median(exact_s)
    print(f"4096x4096 slide, mask {mask.shape[1]}x{mask.shape[0]} px, median of {ROUNDS} rounds")
    print(
        f"thumbnail {thumb:.3f} s | tissue_mask {full:.3f} s ({full / thumb:.1f}x thumbnail) | "
        f"patch_grid {grid:.3f} s ({grid / thumb:.1f}x thumbnail)"
    )
    print(
        f"closing r={RADIUS_PX} px: coarse EDT {fast_m:.3f} s vs exact disk {exact_m:.3f} s, "
        f"speed-up {exact_m / fast_m:.1f}x, IoU {iou:.4f}"
    )


if __name__ == "__main__":
    main()
