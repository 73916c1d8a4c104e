"""Reading 512 sampled patches of a 20,000 x 768 float32 .h5 bag: the whole array, then the
rows (``read_bag_features(path)[rows]``), against only the sampled rows
(``read_bag_rows(path, rows)``), measured side by side in the same run, interleaved, for the
layout TRIDENT and CLAM write (one row per chunk) and for a contiguous dataset. Each repeat
draws new rows as a training step does (:func:`sample_patch_rows`). The files were just
written, so both readers find them in the operating system's page cache: the ratio is the
cost of decoding and copying, not of the disk.
Run: .venv/bin/python bench/bench_limit_bag_reads.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _write(path: Path, features: np.ndarray, row_chunks: bool) -> Path:
    import h5py

    with h5py.File(path, "w") as handle:
        if row_chunks:
            width = features.shape[1]
            handle.create_dataset(
                "features", data=features, chunks=(1, width), maxshape=(None, width)
            )
        else:
            handle.create_dataset("features", data=features)
    return path


def main(repeats: int = 7, patches: int = 20000, dim: int = 768, sample: int = 512) -> int:
    from medvl_engine.features.bags import read_bag_features, read_bag_rows, sample_patch_rows

    features = np.random.default_rng(0).normal(size=(patches, dim)).astype(np.float32)
    generator = torch.Generator().manual_seed(0)
    print(f"bag {patches} x {dim} float32 ({features.nbytes / 2**20:.0f} MiB), {sample} rows")
    with tempfile.TemporaryDirectory() as folder:
        for name, row_chunks in (("one row per chunk (TRIDENT/CLAM)", True), ("contiguous", False)):
            path = _write(Path(folder) / "bag.h5", features, row_chunks)
            whole_s, rows_s = [], []
            for _ in range(repeats):
                rows = sample_patch_rows(patches, sample, generator)
                started = time.perf_counter()
                whole = read_bag_features(path)[torch.from_numpy(rows)]
                whole_s.append(time.perf_counter() - started)
                started = time.perf_counter()
                chunked = read_bag_rows(path, rows)
                rows_s.append(time.perf_counter() - started)
                if not torch.equal(whole, chunked):
                    print("the two readers disagree", file=sys.stderr)
                    return 1
            whole_ms = 1000 * statistics.median(whole_s)
            rows_ms = 1000 * statistics.median(rows_s)
            print(
                f"{name:<34} whole file {whole_ms:7.1f} ms   sampled rows {rows_ms:6.1f} ms   "
                f"whole / rows = {whole_ms / rows_ms:.1f}x (median of {repeats})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
