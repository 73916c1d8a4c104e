"""Refusals and budget checks cost next to nothing: each timed beside the ordinary work it guards.

The tests assert that these inputs are refused (one sentence, bounded memory); how fast that
happens is measured here, side by side in one run (median of interleaved rounds, so a drift in
the machine's load falls on both sides alike), as a ratio to the ordinary call:

  patch grid    patch_size 1 / target_mpp 1e-6 / a 1 px stride refused by patch_grid, vs the
                default 224 px grid of the same synthetic 4096x4096 slide
  feature .h5   a .h5 declaring 10^9 rows (2 TB, nothing written) refused by read_h5_features,
                vs reading a real 2,000 x 768 feature file
  fingerprint   slide_fingerprint of an 8 GiB sparse file vs of a 1 MiB file (a few fixed
                reads whatever the size: the ratio stays near 1)
  train config  `medvl-train topksiglip` refusing task.synthetic_train=10^9 from the tiny
                recipe, vs `medvl-train --help` (both in-process, after the first import)

    .venv/bin/python bench/bench_refusals.py            # about half a minute on 2 cores
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROUNDS = 5
ROOT = Path(__file__).resolve().parents[1]


def _seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _refused(call: Callable[[], object]) -> Callable[[], None]:
    """``call``, checked to end in a MedVLError (a bench of the wrong error measures nothing)."""
    from medvl_engine.errors import MedVLError

    def run() -> None:
        try:
            call()
        except MedVLError:
            return
        raise AssertionError("the input was not refused")

    return run


def _side_by_side(refused: Callable[[], object], ordinary: Callable[[], object]) -> tuple:
    """Median seconds of (refused, ordinary) over ROUNDS interleaved rounds (one warm-up each)."""
    _seconds(refused), _seconds(ordinary)
    pairs = [(_seconds(refused), _seconds(ordinary)) for _ in range(ROUNDS)]
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def _report(name: str, first: str, first_s: float, second: str, second_s: float) -> None:
    ratio = first_s / second_s if second_s > 0 else float("inf")
    print(
        f"{name:<13} {first} {first_s * 1e3:.2f} ms | {second} {second_s * 1e3:.2f} ms | "
        f"ratio {ratio:.3f}"
    )


def _patch_grid(scratch: Path) -> None:
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide
    from medvl_engine.tiling import patch_grid

    truth = make_synthetic_slide(scratch / "bench.tif", seed=4, size=(4096, 4096))
    with open_slide(truth.path) as slide:
        cases = {
            "patch_size 1": lambda: patch_grid(slide, patch_size=1),
            "target_mpp 1e-6": lambda: patch_grid(slide, target_mpp=1e-6),
            "stride 1": lambda: patch_grid(slide, stride=1),
        }
        for label, refused in cases.items():
            refused_s, ordinary_s = _side_by_side(_refused(refused), lambda: patch_grid(slide))
            _report("patch grid", f"{label} refused", refused_s, "default grid", ordinary_s)


def _feature_h5(scratch: Path) -> None:
    from medvl_engine.features.h5_import import read_h5_features

    lazy = scratch / "lazy.h5"
    with h5py.File(lazy, "w") as handle:
        handle.create_dataset("features", shape=(10**9, 512), dtype="f4", chunks=(1, 512))
        handle.create_dataset("coords", shape=(10**9, 2), dtype="i8", chunks=(1, 2))
        handle["coords"].attrs["patch_size_level0"] = 256
    real = scratch / "real.h5"
    rng = np.random.default_rng(0)
    with h5py.File(real, "w") as handle:
        handle["features"] = rng.standard_normal((2000, 768)).astype(np.float32)
        handle["coords"] = np.stack([np.arange(2000) * 256, np.zeros(2000, np.int64)], 1)
        handle["coords"].attrs["patch_size_level0"] = 256
    refused_s, ordinary_s = _side_by_side(
        _refused(lambda: read_h5_features(lazy)), lambda: read_h5_features(real)
    )
    _report("feature .h5", "10^9 rows refused", refused_s, "2,000 x 768 read", ordinary_s)


def _fingerprint(scratch: Path) -> None:
    from medvl_engine.common.fingerprint import slide_fingerprint

    big, small = scratch / "big.svs", scratch / "small.svs"
    with open(big, "wb") as handle:
        handle.write(os.urandom(2**20))
        handle.truncate(8 * 2**30)  # 8 GiB, sparse
    small.write_bytes(os.urandom(2**20))
    big_s, small_s = _side_by_side(lambda: slide_fingerprint(big), lambda: slide_fingerprint(small))
    _report("fingerprint", "8 GiB file", big_s, "1 MiB file", small_s)


def _train_config(scratch: Path) -> None:
    from medvl_engine.cli.train import main

    tiny = ROOT / "train" / "topksiglip_tiny.yaml"
    argv = [
        "topksiglip",
        "--config",
        str(tiny),
        "task.synthetic_train=1000000000",
        f"run.out_dir={scratch / 'run'}",
    ]

    def refused() -> None:
        if main(argv) != 2:
            raise AssertionError("the config was not refused")

    def help_text() -> None:
        with contextlib.suppress(SystemExit):
            main(["--help"])

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        refused_s, help_s = _side_by_side(refused, help_text)
    _report("train config", "10^9 breasts refused", refused_s, "--help", help_s)


def main() -> None:
    print(f"median of {ROUNDS} interleaved rounds; ratio = first / second")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        _patch_grid(scratch)
        _feature_h5(scratch)
        _fingerprint(scratch)
        _train_config(scratch)


if __name__ == "__main__":
    main()
