"""Patch-grid invariants over random slide geometries, on an in-memory slide stand-in."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from medvl_engine.tiling import patch_grid


class ArraySlide:
    """A pyramid of white images with a known tissue mask: just the Slide interface tiling uses."""

    def __init__(self, width: int, height: int, mpp: float | None, n_levels: int) -> None:
        self.dimensions = (width, height)
        self.mpp = None if mpp is None else (mpp, mpp)
        self.level_downsamples = [float(2**i) for i in range(n_levels)]

    def get_best_level_for_downsample(self, downsample: float) -> int:
        return max(i for i, d in enumerate(self.level_downsamples) if d <= downsample + 1e-9)

    def read_region(self, location, level, size):
        return np.full((size[1], size[0], 3), 255, np.uint8)

    def thumbnail(self, max_px: int = 512) -> np.ndarray:
        raise AssertionError("the tests pass their own mask")


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(200, 6000),
    height=st.integers(200, 6000),
    mpp=st.one_of(st.none(), st.floats(0.2, 2.0)),
    target_mpp=st.floats(0.25, 2.0),
    patch_size=st.integers(16, 512),
    stride_factor=st.sampled_from([0.5, 1.0, 2.0]),
    min_tissue=st.floats(0.0, 1.0),
    n_levels=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_grid_invariants(
    width, height, mpp, target_mpp, patch_size, stride_factor, min_tissue, n_levels, seed
):
    slide = ArraySlide(width, height, mpp, n_levels)
    mask_ds = 8.0
    rows, cols = int(np.ceil(height / mask_ds)), int(np.ceil(width / mask_ds))
    mask = np.random.default_rng(seed).uniform(size=(rows, cols)) < 0.5
    stride = max(1, int(patch_size * stride_factor))
    grid = patch_grid(
        slide, patch_size, target_mpp, min_tissue, stride=stride, mask=(mask, mask_ds)
    )
    scale = 1.0 if mpp is None else target_mpp / mpp
    assert grid.mpp_missing == (mpp is None)
    assert grid.patch_size_level0 == max(round(patch_size * scale), 1)
    assert grid.stride_level0 == max(round(stride * scale), 1)
    downsample = slide.level_downsamples[grid.level]
    assert downsample <= max(scale, 1.0) + 1e-9
    assert abs(grid.read_size * downsample - grid.patch_size_level0) <= downsample / 2 + 1e-9
    coords = grid.coords
    assert coords.dtype == np.int64 and coords.ndim == 2 and coords.shape[1] == 2
    assert np.all(coords % grid.stride_level0 == 0)
    assert np.all((coords >= 0) & (coords < np.array([width, height])))
    assert np.all(grid.tissue_fraction >= min_tissue - 1e-6)
    assert np.all(grid.tissue_fraction <= 1.0)
    lattice = len(range(0, width, grid.stride_level0)) * len(range(0, height, grid.stride_level0))
    assert len(grid) <= lattice
    if min_tissue == 0.0:
        assert len(grid) == lattice


def test_patches_smaller_than_a_mask_pixel_take_its_value():
    slide = ArraySlide(1000, 1000, 0.5, 1)
    mask = np.zeros((10, 10), bool)
    mask[3, 4] = True  # level-0 x in [400, 500), y in [300, 400)
    grid = patch_grid(slide, 20, 0.5, 0.5, mask=(mask, 100.0))
    xs, ys = grid.coords[:, 0], grid.coords[:, 1]
    assert len(grid) == 25
    assert xs.min() == 400 and xs.max() == 480 and ys.min() == 300 and ys.max() == 380
    np.testing.assert_allclose(grid.tissue_fraction, 1.0)
