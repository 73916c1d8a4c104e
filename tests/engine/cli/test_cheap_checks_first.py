"""Inputs are checked before any model library loads: a bad features file or an output that
would replace the slide is refused by `medvl heatmap` without importing torch (seconds)."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

_RUN = """
import sys
from medvl_engine.cli.main import main
code = main(sys.argv[1:])
print("exit", code, "torch loaded", "torch" in sys.modules)
"""


@pytest.fixture
def slide_and_bad_h5(tmp_path, write_pyramid_tiff, coordinate_image):
    slide = write_pyramid_tiff(tmp_path / "s.tiff", [coordinate_image(1024, 1024)])
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as handle:
        handle["features"] = np.full((4, 8), np.nan, np.float32)
        handle["coords"] = np.array([[0, 0], [256, 0], [512, 0], [768, 0]])
        handle["coords"].attrs["patch_size_level0"] = 256
    return slide, bad


@pytest.mark.parametrize("case", ["nan-features", "output-is-the-slide"])
def test_heatmap_refuses_bad_inputs_before_torch_is_imported(slide_and_bad_h5, tmp_path, case):
    slide, bad = slide_and_bad_h5
    out = slide if case == "output-is-the-slide" else tmp_path / "o.png"
    argv = ["heatmap", str(slide), "--prompt", "x", "--features", str(bad), "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "exit 2 torch loaded False", result.stderr
    (line,) = result.stderr.strip().splitlines()
    expected = "not finite numbers" if case == "nan-features" else "is the input s.tiff"
    assert line.startswith("medvl: error: ") and expected in line
