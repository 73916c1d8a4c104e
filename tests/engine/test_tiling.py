"""Tissue masks and patch grids on synthetic slides with known ground truth."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from PIL import Image

from medvl_engine.io.slide import open_slide
from medvl_engine.synthetic import TISSUE_CLASSES, make_synthetic_slide, render_tissue
from medvl_engine.tiling import PatchGrid, patch_grid, pen_mask, tissue_mask

SIZE = (1536, 1024)
MASK_PX = 768  # mask downsample 2 = the label map's


def _iou(a: np.ndarray, b: np.ndarray, valid: np.ndarray | None = None) -> float:
    valid = np.ones_like(a) if valid is None else valid
    return float((a & b & valid).sum() / max(((a | b) & valid).sum(), 1))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("tiling")


@pytest.fixture(scope="module")
def all_classes(folder):
    truth = make_synthetic_slide(
        folder / "all.tif", seed=0, size=SIZE, classes=TISSUE_CLASSES[1:], organ="breast"
    )
    with open_slide(truth.path) as slide:
        yield truth, slide


def _write_tiled_tiff(path, image: np.ndarray) -> None:
    """A single-level RGB TIFF, 256 px tiles, 0.5 um/px in its resolution tags."""
    tifffile.imwrite(
        path,
        image,
        tile=(256, 256),
        photometric="rgb",
        resolution=(2e4, 2e4),
        resolutionunit="CENTIMETER",
    )


@pytest.mark.parametrize("seed", [2, 6])
def test_mask_agrees_with_ground_truth(folder, seed):
    truth = make_synthetic_slide(folder / f"gt{seed}.tif", seed=seed, size=SIZE)
    with open_slide(truth.path) as slide:
        mask, downsample = tissue_mask(slide, max_px=MASK_PX)
    assert downsample == pytest.approx(truth.label_downsample)
    assert mask.shape == truth.label_map.shape and mask.dtype == bool
    assert _iou(mask, truth.tissue_mask) > 0.9


def test_mask_with_all_classes_including_fat_and_necrosis(all_classes):
    truth, slide = all_classes
    mask, _ = tissue_mask(slide, max_px=MASK_PX)
    assert _iou(mask, truth.tissue_mask) > 0.9
    for name in ("adipose", "necrosis"):
        region = truth.label_map == TISSUE_CLASSES.index(name)
        assert mask[region].mean() > 0.9, name


def test_pen_ink_is_left_out_of_the_mask(folder):
    truth = make_synthetic_slide(folder / "pen.tif", seed=4, size=SIZE, pen_marks=True)
    assert truth.pen_mask.any()
    with open_slide(truth.path) as slide:
        mask, _ = tissue_mask(slide, max_px=MASK_PX)
        unfiltered, _ = tissue_mask(slide, max_px=MASK_PX, exclude_pen=False)
    ink_outside_tissue = truth.pen_mask & ~truth.tissue_mask
    assert mask[truth.pen_mask].mean() < 0.02
    assert unfiltered[ink_outside_tissue].mean() > 0.5
    assert _iou(mask, truth.tissue_mask, valid=~truth.pen_mask) > 0.9


def test_pen_rules_flag_ink_but_no_stained_tissue():
    rng = np.random.default_rng(0)
    for cid in range(len(TISSUE_CLASSES)):
        texture = render_tissue(cid, (128, 128), rng)
        small = texture.reshape(32, 4, 32, 4, 3).mean(axis=(1, 3)).astype(np.uint8)
        assert not pen_mask(small).any(), TISSUE_CLASSES[cid]
    inks = np.array([[[25, 50, 170], [30, 140, 60], [20, 20, 25], [240, 240, 240]]], np.uint8)
    assert pen_mask(inks).tolist() == [[True, True, True, False]]


def test_blank_slide_gives_empty_mask_and_grid(folder):
    path = folder / "blank.tif"
    rng = np.random.default_rng(1)
    glass = np.clip(rng.normal(244, 2.0, (1024, 1024, 3)), 0, 255).astype(np.uint8)
    _write_tiled_tiff(path, glass)
    with open_slide(path) as slide:
        mask, _ = tissue_mask(slide)
        grid = patch_grid(slide, mask=(mask, 1024 / mask.shape[1]))
    assert not mask.any()
    assert len(grid) == 0 and grid.coords.shape == (0, 2) and grid.coords.dtype == np.int64


def test_grid_lattice_tissue_fraction_and_recall(all_classes):
    truth, slide = all_classes
    grid = patch_grid(slide, patch_size=256, target_mpp=0.5, min_tissue=0.25)
    assert isinstance(grid, PatchGrid) and len(grid) > 10
    assert grid.coords.dtype == np.int64 and grid.coords.shape == (len(grid), 2)
    assert (grid.patch_size, grid.patch_size_level0, grid.level, grid.read_size) == (
        256,
        256,
        0,
        256,
    )
    assert np.all(grid.coords % 256 == 0)
    assert np.all(grid.tissue_fraction >= 0.25)
    order = grid.coords[:, 1] * 10**6 + grid.coords[:, 0]
    assert np.all(np.diff(order) > 0), "patches are listed row by row"
    ds = truth.label_downsample
    gt = truth.tissue_mask
    lattice = [(x, y) for y in range(0, SIZE[1], 256) for x in range(0, SIZE[0], 256)]
    kept = {tuple(c) for c in grid.coords.tolist()}
    for x, y in lattice:
        gt_fraction = (
            gt[y // ds : (y + 256) // ds, x // ds : (x + 256) // ds].sum() / (256 // ds) ** 2
        )
        if gt_fraction >= 0.4:
            assert (x, y) in kept, (x, y, gt_fraction)
        if (x, y) in kept:
            assert gt_fraction >= 0.1, (x, y, gt_fraction)


def test_overlapping_stride(all_classes):
    _, slide = all_classes
    grid = patch_grid(slide, patch_size=256, target_mpp=0.5, stride=128, min_tissue=0.5)
    assert grid.stride_level0 == 128 and np.all(grid.coords % 128 == 0)
    assert np.any(grid.coords % 256 == 128)


def test_patch_size_level0_at_quarter_micron_reads_a_coarser_level(folder):
    truth = make_synthetic_slide(folder / "fine.tif", seed=3, size=SIZE, mpp=0.25)
    with open_slide(truth.path) as slide:
        grid = patch_grid(slide, patch_size=224, target_mpp=0.5, min_tissue=0.5)
        assert (grid.patch_size_level0, grid.level, grid.read_size) == (448, 1, 224)
        assert grid.target_mpp == 0.5 and grid.slide_mpp == pytest.approx(0.25)
        assert np.all(grid.coords % 448 == 0) and len(grid) > 0
        patch = grid.read_patch(slide, 0)
        assert patch.shape == (224, 224, 3) and patch.dtype == np.uint8
        x, y = grid.coords[0]
        full = slide.read_region((int(x), int(y)), 0, (448, 448))
        reference = np.asarray(Image.fromarray(full).resize((224, 224), Image.Resampling.BOX))
        assert np.abs(patch.astype(int) - reference.astype(int)).mean() < 4.0
        batch = grid.read_patches(slide, [0, len(grid) - 1])
        assert batch.shape == (2, 224, 224, 3)
        np.testing.assert_array_equal(batch[0], patch)


def test_patch_size_level0_at_half_micron_and_coarser_target(all_classes):
    _, slide = all_classes
    grid = patch_grid(slide, patch_size=448, target_mpp=0.5)
    assert (grid.patch_size_level0, grid.level, grid.read_size) == (448, 0, 448)
    coarse = patch_grid(
        slide, patch_size=224, target_mpp=1.0, mask=(grid.mask, grid.mask_downsample)
    )
    assert (coarse.patch_size_level0, coarse.level, coarse.read_size) == (448, 1, 224)
    assert coarse.read_patch(slide, 0).shape == (224, 224, 3)
    assert coarse.attrs()["patch_size_level0"] == 448


def test_slide_without_mpp_uses_level0_pixels(folder):
    truth = make_synthetic_slide(folder / "nompp.tif", seed=5, size=(1024, 1024), mpp=None)
    with open_slide(truth.path) as slide:
        assert slide.mpp is None
        grid = patch_grid(slide, patch_size=128, target_mpp=0.5)
    assert grid.mpp_missing and grid.target_mpp is None and grid.slide_mpp is None
    assert (grid.patch_size_level0, grid.level, grid.read_size) == (128, 0, 128)
    assert len(grid) > 0 and np.all(grid.coords % 128 == 0)


def test_bad_arguments_are_refused(all_classes):
    _, slide = all_classes
    with pytest.raises(ValueError, match="patch_size must be a positive"):
        patch_grid(slide, patch_size=0)
    with pytest.raises(ValueError, match="min_tissue must lie in"):
        patch_grid(slide, min_tissue=1.5)
    with pytest.raises(ValueError, match="target_mpp must be a positive"):
        patch_grid(slide, target_mpp=0)


def test_small_crop_keeps_its_tissue(folder):
    truth = make_synthetic_slide(folder / "crop.tif", seed=1, size=(300, 200))
    with open_slide(truth.path) as slide:
        mask, _ = tissue_mask(slide)
        grid = patch_grid(slide, patch_size=64, target_mpp=0.5, mask=(mask, 1.0))
    assert _iou(mask, truth.tissue_mask) > 0.85
    assert len(grid) > 0


def test_errors_are_medvl_errors_and_value_errors(all_classes):
    from medvl_engine.errors import MedVLError

    _, slide = all_classes
    with pytest.raises(MedVLError):
        patch_grid(slide, stride=0)
    with pytest.raises(ValueError):
        patch_grid(slide, stride=-3)


def test_real_he_slide_mask_keeps_stained_tissue_and_drops_glass(sample_file):
    path = sample_file("slides/CMU-1-Small-Region.svs")
    with open_slide(path) as slide:
        mask, downsample = tissue_mask(slide)
        rgb = slide.thumbnail(1024)
        grid = patch_grid(slide, mask=(mask, downsample))
    assert mask.shape == rgb.shape[:2]
    top, bottom = rgb.max(axis=2).astype(float), rgb.min(axis=2).astype(float)
    stained = (top - bottom) / np.maximum(top, 1) > 0.3
    glass = bottom > 225
    assert mask[stained].mean() > 0.95
    assert mask[glass].mean() < 0.1
    assert 0.2 < mask.mean() < 0.6
    assert len(grid) >= 8 and grid.patch_size_level0 == 449


def test_dark_field_scan_masks_the_shining_tissue(folder):
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[:768, :1024]
    blob = ((yy - 384) / 250.0) ** 2 + ((xx - 500) / 330.0) ** 2 < 1.0
    image = np.zeros((768, 1024, 3), np.uint8)
    image[..., 2] = np.where(blob, 40 + 120 * (rng.uniform(size=blob.shape) < 0.4), 4)
    image[..., 0] = 2
    path = folder / "dapi.tif"
    _write_tiled_tiff(path, image)
    with open_slide(path) as slide:
        mask, _ = tissue_mask(slide)
    assert _iou(mask, blob) > 0.9


def test_real_fluorescence_ndpi_gets_a_mask_and_patches(sample_file):
    with open_slide(sample_file("slides/test3-DAPI-2.ndpi")) as slide:
        mask, downsample = tissue_mask(slide)
        assert 0.5 < mask.mean() < 0.95
        assert len(patch_grid(slide, mask=(mask, downsample))) > 10
