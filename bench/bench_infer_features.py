"""Feature extraction throughput: the whole pipeline vs the encoder alone, in one run.

Writes a synthetic pyramidal slide (JPEG tiles), then measures on the same patch grid:
  encoder alone   encode_patches on batches already decoded in memory
  whole pipeline  extract_features: threaded tile reading + decoding + encoding + zarr writes
and prints the median patches/s of both over interleaved rounds and their ratio
(target >= 0.8: reading hidden behind compute).
Usage: bench_infer_features.py [ENCODER] (default medvl-demo).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from medvl_engine.encoders import load_encoder
from medvl_engine.features import extract_features
from medvl_engine.io.slide import open_slide
from medvl_engine.synthetic import make_synthetic_slide

BATCH = 32
ROUNDS = 3
SLIDE_SIZE = (3072, 3072)


class _Grid:
    def __init__(self, coords: np.ndarray, patch_size: int) -> None:
        self.coords, self.patch_size, self.patch_size_level0 = coords, patch_size, patch_size
        self.level, self.target_mpp = 0, 0.5


def main() -> None:
    encoder = load_encoder(sys.argv[1] if len(sys.argv) > 1 else "medvl-demo")
    size = encoder.patch_size
    with tempfile.TemporaryDirectory() as scratch:
        truth = make_synthetic_slide(Path(scratch) / "bench.tiff", seed=1, size=SLIDE_SIZE)
        with open_slide(truth.path) as slide:
            xs = np.arange(0, SLIDE_SIZE[0] - size + 1, size)
            ys = np.arange(0, SLIDE_SIZE[1] - size + 1, size)
            coords = np.array([(x, y) for y in ys for x in xs], dtype=np.int64)
            grid = _Grid(coords, size)
            batches = [
                np.stack(
                    [slide.read_region(tuple(c), 0, (size, size)) for c in coords[i : i + BATCH]]
                )
                for i in range(0, len(coords), BATCH)
            ]
            encoder.encode_patches(batches[0])  # warm-up
            encoder_rates, pipeline_rates = [], []
            for round_index in range(ROUNDS):  # interleaved, so load changes hit both alike
                start = time.perf_counter()
                for batch in batches:
                    encoder.encode_patches(batch)
                encoder_rates.append(len(coords) / (time.perf_counter() - start))
                out = Path(scratch) / f"f{round_index}.zarr"
                start = time.perf_counter()
                extract_features(slide, encoder, grid, out, batch_size=BATCH)
                pipeline_rates.append(len(coords) / (time.perf_counter() - start))
    encoder_rate, pipeline_rate = float(np.median(encoder_rates)), float(np.median(pipeline_rates))
    print(f"encoder {encoder.name}, {len(coords)} patches of {size} px, batch {BATCH}")
    print(f"median of {ROUNDS} interleaved rounds")
    print(f"encoder alone (in memory)   {encoder_rate:8.1f} patches/s")
    print(f"whole extraction            {pipeline_rate:8.1f} patches/s")
    ratio = pipeline_rate / encoder_rate
    print(f"ratio {ratio:.2f} (target >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'})")


if __name__ == "__main__":
    main()
