"""Work budgets of the patch grid: patch counts and sizes are checked before anything is made.

A model config with ``patch_size: 1`` or ``target_mpp: 1e-6`` used to queue millions (or lay
billions) of patches; a grid with ``patch_size_level0`` 0, -224, 1e9 or 1.5 was extracted.
Each is now one sentence, before a coordinate is allocated or a file written (how long a
refusal takes is measured by ``bench/bench_refusals.py``, not asserted here).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from medvl_engine.errors import ConfigError, ResourceLimitError
from medvl_engine.tiling import MAX_PATCHES, PatchGridError, check_grid_budget, patch_grid


class HugeSlide:
    """The Slide interface of a 200,000 x 150,000 px scan at 0.25 um/px, tissue everywhere.

    Nothing is stored: pixels are white and the thumbnail is a stained square, so a test can
    ask for any grid and see what the grid code allocates.
    """

    path = "huge.svs"

    def __init__(self, width: int = 200_000, height: int = 150_000, mpp: float | None = 0.25):
        self.dimensions = (width, height)
        self.mpp = None if mpp is None else (mpp, mpp)
        self.level_downsamples = [1.0, 4.0, 16.0, 64.0]
        self.level_dimensions = [
            (width // int(d), height // int(d)) for d in self.level_downsamples
        ]

    def get_best_level_for_downsample(self, downsample: float) -> int:
        return max(i for i, d in enumerate(self.level_downsamples) if d <= downsample + 1e-9)

    def read_region(self, location, level, size):
        return np.full((size[1], size[0], 3), 255, np.uint8)

    def thumbnail(self, max_px: int = 512) -> np.ndarray:
        image = np.full((384, 512, 3), 230, np.uint8)
        image[40:340, 40:470] = (150, 60, 140)  # H&E-like purple
        return image


class Grid:
    """A patch grid as a caller might build one by hand (any object with these attributes)."""

    def __init__(self, coords, patch_size=64, patch_size_level0=64, read_size=64):
        self.coords = np.asarray(coords, dtype=np.int64).reshape(-1, 2)
        self.patch_size = patch_size
        self.patch_size_level0 = patch_size_level0
        self.read_size = read_size
        self.level = 0
        self.target_mpp = 0.5


def _mask():
    return np.ones((384, 512), bool), 200_000 / 512


def test_a_one_pixel_patch_is_refused_in_words_at_once():
    with pytest.raises(PatchGridError, match=r"patch_size 1 px is below the smallest patch of 8"):
        patch_grid(HugeSlide(), patch_size=1, target_mpp=0.5, mask=_mask())


def test_a_target_mpp_of_1e_6_is_refused_in_words_at_once():
    with pytest.raises(PatchGridError) as caught:
        patch_grid(HugeSlide(), patch_size=224, target_mpp=1e-6, mask=_mask())
    message = str(caught.value)
    assert (
        "target_mpp 1e-06 um/px is 2.5e+05 times finer than slide huge.svs (0.25 um/px)" in message
    )
    assert "use a target_mpp of at least 0.015625 um/px" in message


@pytest.mark.parametrize(
    ("patch_size", "target_mpp", "message"),
    [
        (1.5, 0.5, "patch_size must be a whole number of px, got 1.5"),
        (True, 0.5, "patch_size must be a whole number of px, got True"),
        ("224", 0.5, "patch_size must be a whole number of px, got '224'"),
        (100_000, 0.5, "patch_size 100,000 px is above the largest patch of 8,192 px"),
        (224, float("nan"), "target_mpp must be a positive um/px value, got nan"),
        (224, float("inf"), "target_mpp must be a positive um/px value, got inf"),
    ],
)
def test_sizes_that_make_no_grid_are_refused(patch_size, target_mpp, message):
    with pytest.raises(PatchGridError, match=message):
        patch_grid(HugeSlide(), patch_size=patch_size, target_mpp=target_mpp, mask=_mask())


def test_a_grid_above_the_patch_budget_is_counted_before_it_is_made():
    """A 1 px stride on a 200k x 150k slide is 30 billion lattice points (240 GB of coords)."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ResourceLimitError) as caught:
            patch_grid(HugeSlide(), patch_size=224, target_mpp=0.25, stride=1, mask=_mask())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20
    message = str(caught.value)
    assert "would lay 30,000,000,000 patches over slide huge.svs (200,000 x 150,000 px)" in message
    assert f"more than the {MAX_PATCHES:,} one grid may hold (MEDVL_MAX_PATCHES)" in message
    assert isinstance(caught.value, ConfigError)  # also a grid error, as before


def test_the_default_budget_fits_the_largest_real_slide():
    """A 300,000 x 100,000 px scan (a whole 75 x 25 mm glass at 0.25 um/px) in 224 px patches
    at 0.5 um/px, even at half-patch stride, fits the default budget."""
    slide = HugeSlide(300_000, 100_000)
    grid = patch_grid(slide, patch_size=224, target_mpp=0.5, stride=112, mask=_mask())
    assert 0 < len(grid) <= MAX_PATCHES
    assert grid.patch_size_level0 == 448


def test_the_patch_budget_follows_the_environment(monkeypatch):
    slide = HugeSlide(20_000, 10_000)
    mask = (np.ones((256, 512), bool), 20_000 / 512)
    assert (
        len(patch_grid(slide, patch_size=224, target_mpp=0.5, min_tissue=0.0, mask=mask)) == 45 * 23
    )
    monkeypatch.setenv("MEDVL_MAX_PATCHES", "1000")
    with pytest.raises(ResourceLimitError, match=r"1,035 patches .* more than the 1,000 one"):
        patch_grid(slide, patch_size=224, target_mpp=0.5, min_tissue=0.0, mask=mask)
    monkeypatch.setenv("MEDVL_MAX_PATCHES", "not a number")  # ignored: the default holds
    assert (
        len(patch_grid(slide, patch_size=224, target_mpp=0.5, min_tissue=0.0, mask=mask)) == 45 * 23
    )


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"patch_size_level0": 0}, "patch_size_level0 must be between 1 and"),
        ({"patch_size_level0": -224}, "patch_size_level0 must be between 1 and"),
        ({"patch_size_level0": 10**9}, "got 1,000,000,000; rebuild the patch grid"),
        ({"patch_size_level0": 1.5}, "patch_size_level0 must be a whole number of px, got 1.5"),
        ({"patch_size_level0": None}, "patch_size_level0 must be a whole number of px, got None"),
        ({"patch_size": 1}, "patch_size 1 px is below the smallest patch of 8 px"),
        ({"read_size": 0}, "read_size must be a positive number of px, got 0"),
        ({"read_size": 50_000}, "each patch read from the slide is 50,000 px is above"),
    ],
)
def test_hand_made_grids_with_impossible_sizes_are_refused(attributes, message):
    grid = Grid([[0, 0], [64, 0]])
    for key, value in attributes.items():
        setattr(grid, key, value)
    with pytest.raises(PatchGridError, match=message):
        check_grid_budget(grid, 8)


def test_a_batch_too_large_to_hold_is_refused(monkeypatch):
    grid = Grid([[0, 0]], patch_size=4096, patch_size_level0=4096, read_size=4096)
    check_grid_budget(grid, 4)
    with pytest.raises(ResourceLimitError, match=r"a batch of 64 patches of 4,096 px holds"):
        check_grid_budget(grid, 64)


@pytest.mark.parametrize("patch_size_level0", [0, -224, 10**9, 1.5])
def test_extraction_refuses_a_bad_grid_before_writing(tmp_path, patch_size_level0):
    from medvl_engine.features import extract_features

    grid = Grid([[0, 0], [64, 0]], patch_size_level0=patch_size_level0)
    with pytest.raises(PatchGridError, match="patch_size_level0"):
        extract_features(HugeSlide(), _NoEncoder(), grid, tmp_path / "f.zarr")
    assert list(tmp_path.iterdir()) == []


def test_extraction_refuses_a_grid_above_the_budget(tmp_path, monkeypatch):
    from medvl_engine.features import extract_features

    monkeypatch.setenv("MEDVL_MAX_PATCHES", "10")
    grid = Grid([[x, 0] for x in range(0, 64 * 11, 64)])
    with pytest.raises(ResourceLimitError, match=r"holds 11 patches, more than the 10"):
        extract_features(HugeSlide(), _NoEncoder(), grid, tmp_path / "f.zarr")
    assert list(tmp_path.iterdir()) == []


class _NoEncoder:
    """An encoder that must never be asked to encode (the grid is refused first)."""

    name = "never"
    embed_dim = 4
    patch_size = 1
    target_mpp = 0.5

    def encode_patches(self, patches, normalize=True):
        raise AssertionError("a refused grid reached the encoder")


def test_a_model_config_with_patch_size_1_is_refused_in_a_child_process(run_limited):
    """slide_features with an encoder whose config says patch_size: 1 on a large slide:
    refused in words, within a small memory and time budget (was millions of patches)."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from tests.engine.test_tiling_budgets import HugeSlide, _NoEncoder
        from medvl_engine.errors import MedVLError
        from medvl_engine.features import slide_features
        try:
            slide_features(HugeSlide(), _NoEncoder(), "{{out}}")
        except MedVLError as error:
            print(error)
            sys.exit(2)
        """
    )
    returncode, stdout, stderr, peak_mb = run_limited(
        code.replace("{out}", "/nonexistent/never.zarr"), timeout_s=60, max_mb=1024
    )
    assert returncode == 2, stderr
    assert "patch_size 1 px is below the smallest patch of 8 px" in stdout
    assert "Traceback" not in stderr and peak_mb < 1024
