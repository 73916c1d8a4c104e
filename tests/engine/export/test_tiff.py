"""The heatmap TIFF lies over its slide: full level-0 extent, pixel (x, y) at level-0 (x d, y d)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from medvl_engine.colormaps import apply_colormap
from medvl_engine.errors import CorruptFileError, ExportError
from medvl_engine.export import (
    export_heatmap,
    heatmap_tiff_downsample,
    read_heatmap_tiff_description,
    write_heatmap_tiff,
    write_npz,
)
from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import similarity_map

SLIDE_SIZE = (1000, 700)  # (width, height) level-0 px, not a multiple of any downsample used


def _store(origin=(37, 53), patch=64, stride=64, dims=SLIDE_SIZE, mpp=(0.5, 0.5), hole=(2, 1)):
    """A patch grid starting at ``origin`` (x, y) level-0 px, one patch missing at ``hole``."""
    columns = (dims[0] - origin[0] - patch) // stride + 1
    rows = (dims[1] - origin[1] - patch) // stride + 1
    coords = [
        (origin[0] + c * stride, origin[1] + r * stride)
        for r in range(rows)
        for c in range(columns)
        if (c, r) != hole
    ]
    features = np.random.default_rng(0).normal(size=(len(coords), 8))
    return FeatureStore(
        features,
        np.array(coords, np.int64),
        patch_size_level0=patch,
        patch_size=224,
        mpp=mpp,
        slide_dimensions=dims,
        stride=stride,
    )


def _heatmap(store, normalize="minmax"):
    prompt = torch.from_numpy(np.random.default_rng(1).normal(size=(1, 8))).float()
    return similarity_map(store, prompt, normalize=normalize, prompt="tumor")


def _read_levels(path):
    """All pyramid levels of a TIFF (main page, then its SubIFDs) as numpy arrays."""
    import tifffile

    with tifffile.TiffFile(path) as tif:
        return [level.asarray() for level in tif.series[0].levels]


def _saved_heatmap(tmp_path):
    """The test store's heatmap saved as .npz (what `medvl export` reads)."""
    store = _store()
    return write_npz(
        tmp_path / "h.npz",
        _heatmap(store),
        store.coords,
        store.patch_size_level0,
        store.mpp,
        store.slide_dimensions,
    )


def test_tiff_from_a_real_slide_covers_it_and_puts_each_score_under_its_patch(tmp_path):
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    truth = make_synthetic_slide(tmp_path / "slide.tiff", seed=2, size=SLIDE_SIZE, mpp=0.5)
    store = _store()
    store.slide_dimensions = None  # the open slide supplies its extent
    heatmap = _heatmap(store)
    with open_slide(truth.path) as slide:
        path = export_heatmap(tmp_path / "heat.tiff", heatmap, store, slide=slide)
        slide_dims, slide_mpp = slide.dimensions, slide.mpp
    description = read_heatmap_tiff_description(path)
    d = description["downsample"]
    assert d == 16  # 8 um at 0.5 um/px; gcd(64, 37, 53) = 1 has no divisor near 16
    assert description["origin_level0"] == [0, 0]
    assert description["slide_dimensions"] == list(slide_dims)
    with open_slide(path) as tiff:
        assert tiff.dimensions == (math.ceil(slide_dims[0] / d), math.ceil(slide_dims[1] / d))
        assert tiff.mpp == pytest.approx((slide_mpp[0] * d, slide_mpp[1] * d), rel=1e-6)
        pixels = tiff.read_region((0, 0), 0, tiff.dimensions)
    colours = apply_colormap(heatmap.scores)  # min-max scores already span [0, 1]
    centres = store.coords + store.patch_size_level0 // 2  # (x, y) level-0 px
    for (x, y), colour in zip(centres, colours, strict=True):
        np.testing.assert_array_equal(pixels[y // d, x // d], colour)
    hole_centre = np.array([37 + 2 * 64 + 32, 53 + 64 + 32])
    assert (pixels[hole_centre[1] // d, hole_centre[0] // d] == 255).all()  # no patch: white
    assert (pixels[0, 0] == 255).all() and (pixels[-1, -1] == 255).all()


def test_scores_tiff_holds_float_values_nan_outside_and_an_aligned_pyramid(tmp_path):
    store = _store(origin=(64, 128), dims=(1200, 1100))
    heatmap = _heatmap(store, normalize="none")
    path = write_heatmap_tiff(
        tmp_path / "scores.tif",
        heatmap,
        slide_dimensions=store.slide_dimensions,
        mpp=store.mpp,
        downsample=2,
        values="scores",
    )
    levels = _read_levels(path)
    assert [level.dtype for level in levels] == [np.float32, np.float32]
    assert [level.shape for level in levels] == [(550, 600), (275, 300)]
    centres = store.coords + 32
    for level, d in zip(levels, (2, 4), strict=True):
        np.testing.assert_array_equal(level[centres[:, 1] // d, centres[:, 0] // d], heatmap.scores)
        # the first patch spans level-0 [64, 128) x [128, 192): exactly these pixels
        assert np.isfinite(level[128 // d : 192 // d, 64 // d : 128 // d]).all()
        assert np.isnan(level[: 128 // d]).all() and np.isnan(level[:, : 64 // d]).all()
        assert np.isnan(level[(128 + 64 + 32) // d, (64 + 2 * 64 + 32) // d])  # the hole's centre
    description = read_heatmap_tiff_description(path)
    assert description["values"] == "scores" and description["mpp"] == [1.0, 1.0]
    assert description["grid_origin_level0"] == [64, 128]


def test_rgba_tiff_is_transparent_exactly_where_no_patch_lies(tmp_path):
    store = _store(origin=(64, 128))
    heatmap = _heatmap(store)
    path = write_heatmap_tiff(
        tmp_path / "rgba.tiff", heatmap, slide_dimensions=SLIDE_SIZE, mpp=store.mpp
    )
    (rgba,) = _read_levels(path)
    d = read_heatmap_tiff_description(path)["downsample"]
    assert d == 16  # the largest divisor of gcd(64, 64, 128) not above 16: cell edges exact
    assert rgba.shape == (math.ceil(700 / d), math.ceil(1000 / d), 4)
    covered = np.zeros(rgba.shape[:2], bool)
    for x, y in store.coords:
        covered[y // d : (y + 64) // d, x // d : (x + 64) // d] = True
    np.testing.assert_array_equal(rgba[..., 3], np.where(covered, 255, 0))


def test_a_downsample_that_does_not_divide_the_cell_still_places_every_centre(tmp_path):
    store = _store(origin=(64, 128), patch=96, stride=48)  # overlapping patches: 48 px cells
    heatmap = _heatmap(store, normalize="none")
    path = write_heatmap_tiff(
        tmp_path / "odd.tif",
        heatmap,
        slide_dimensions=SLIDE_SIZE,
        mpp=None,
        downsample=7,
        values="scores",
    )
    (scores,) = _read_levels(path)
    assert scores.shape == (100, 143)
    rows, cols = np.nonzero(np.isfinite(heatmap.grid))
    corners = heatmap.cell_to_level0(rows, cols)  # (x, y) level-0 top-left of each cell
    for (x, y), value in zip(corners, heatmap.grid[rows, cols], strict=True):
        # every pixel whose centre lies inside the cell holds that cell's value
        xs = [c for c in range(x // 7, (x + 48) // 7 + 1) if x <= (c + 0.5) * 7 < x + 48]
        ys = [r for r in range(y // 7, (y + 48) // 7 + 1) if y <= (r + 0.5) * 7 < y + 48]
        np.testing.assert_array_equal(scores[np.ix_(ys, xs)], value)


def test_default_downsample_is_about_8_um_and_divides_the_cells():
    assert heatmap_tiff_downsample(_heatmap(_store(origin=(64, 128))), (0.25, 0.25)) == 32
    assert heatmap_tiff_downsample(_heatmap(_store(origin=(64, 128))), (0.5, 0.5)) == 16
    assert (
        heatmap_tiff_downsample(_heatmap(_store(origin=(0, 0), patch=100, stride=100)), (0.5, 0.5))
        == 10
    )
    assert heatmap_tiff_downsample(_heatmap(_store(origin=(64, 128))), None) == 8  # 1/8 cell
    assert heatmap_tiff_downsample(_heatmap(_store(origin=(64, 128))), (20.0, 20.0)) == 1


def test_cli_export_writes_the_aligned_tiff(tmp_path):
    from medvl_engine.cli.main import main
    from medvl_engine.io.slide import open_slide

    saved = _saved_heatmap(tmp_path)
    out = tmp_path / "x.tiff"
    assert main(["export", str(saved), "--out", str(out)]) == 0
    with open_slide(out) as tiff:
        assert tiff.dimensions == (63, 44)  # ceil(1000 / 16), ceil(700 / 16)
        assert tiff.mpp == pytest.approx((8.0, 8.0))
    assert json.loads(json.dumps(read_heatmap_tiff_description(out)))["downsample"] == 16


def test_bad_tiff_requests_are_explained_and_write_nothing(tmp_path):
    store = _store()
    heatmap = _heatmap(store)
    with pytest.raises(ExportError, match="downsample must be a whole number"):
        write_heatmap_tiff(tmp_path / "a.tiff", heatmap, downsample=0)
    with pytest.raises(ExportError, match="TIFF values 'png' are unknown; use rgba or scores"):
        export_heatmap(tmp_path / "a.tiff", heatmap, store, tiff_values="png")
    with pytest.raises(ExportError, match="too large; choose a larger downsample"):
        write_heatmap_tiff(tmp_path / "a.tiff", heatmap, slide_dimensions=(10**6, 10**6))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ExportError, match="a.tiff does not exist"):
        read_heatmap_tiff_description(tmp_path / "a.tiff")
    csv_path = export_heatmap(tmp_path / "a.csv", heatmap, store)
    with pytest.raises(CorruptFileError, match="a.csv is not a heatmap TIFF written by medvl"):
        read_heatmap_tiff_description(csv_path)


def test_cli_heatmap_tiff_puts_every_patch_score_at_its_centre(tmp_path):
    import csv

    from medvl_engine.cli.main import main
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    truth = make_synthetic_slide(
        tmp_path / "s.tiff", seed=3, size=SLIDE_SIZE, classes=("tumor", "stroma")
    )
    tiff, table = tmp_path / "h.tiff", tmp_path / "h.csv"
    argv = ["heatmap", str(truth.path), "--prompt", "tumor", "--out", str(tiff)]
    assert main([*argv, "--out", str(table)]) == 0
    description = read_heatmap_tiff_description(tiff)
    d, (low, high) = description["downsample"], description["color_limits"]
    colormap = description["colormap"]
    with open_slide(tiff) as heat:
        assert heat.dimensions == (math.ceil(1000 / d), math.ceil(700 / d))
        assert heat.mpp == pytest.approx((0.5 * d, 0.5 * d))
        pixels = heat.read_region((0, 0), 0, heat.dimensions)
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows
    for row in rows:
        x = (int(row["x0"]) + int(row["x1"])) // 2
        y = (int(row["y0"]) + int(row["y1"])) // 2
        position = (float(row["score"]) - low) / (high - low)
        colour = apply_colormap(np.array([position]), colormap)[0]
        np.testing.assert_allclose(pixels[y // d, x // d], colour, atol=1)  # CSV rounds to 1e-6


def test_cli_tiff_options_choose_scores_and_downsample(tmp_path):
    import tifffile

    from medvl_engine.cli.main import main

    saved = _saved_heatmap(tmp_path)
    out = tmp_path / "scores.tiff"
    argv = ["export", str(saved), "--out", str(out), "--tiff-values", "scores"]
    assert main([*argv, "--tiff-downsample", "20"]) == 0
    description = read_heatmap_tiff_description(out)
    assert description["downsample"] == 20 and description["values"] == "scores"
    pixels = tifffile.imread(out)
    assert pixels.dtype == np.float32 and pixels.shape[:2] == (35, 50)  # ceil(700/20), 1000/20
