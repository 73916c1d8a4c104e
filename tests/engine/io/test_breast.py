"""breast_image: crop, flip, rotation, CC-over-MLO stacking, exact mapping back to sources."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from medvl_engine.errors import MedVLError
from medvl_engine.io import breast_image, open_mammogram
from medvl_engine.io.mammo import Mammogram

LESION_XY = (260, 700)  # (x, y) source px of the bright lesion in the left-breast view


def synthetic_view(laterality: str, view: str, tissue: float) -> Mammogram:
    """A 1200 x 800 view: half-ellipse breast on the chest-wall side, one bright round lesion.

    Left breasts have the chest wall at x = 0; right breasts are the mirror image.
    """
    height, width = 1200, 800
    rows, cols = np.mgrid[0:height, 0:width]
    breast = ((cols / 520.0) ** 2 + ((rows - 620) / 520.0) ** 2) <= 1.0
    pixels = np.where(breast, tissue, 0.02).astype(np.float32)
    lesion = (cols - LESION_XY[0]) ** 2 + (rows - LESION_XY[1]) ** 2 <= 30**2
    pixels[lesion] = 1.0
    pixels[10:40, 700:780] = 0.9  # a marker in the background, not attached to the breast
    if laterality == "R":
        pixels = pixels[:, ::-1].copy()
    return Mammogram(path=Path(f"{laterality}_{view}.png"), pixels=pixels, laterality=laterality)


def lesion_source_box(laterality: str) -> np.ndarray:
    x, y = LESION_XY
    if laterality == "R":
        x = 800 - x
    return np.array([[x - 30, y - 30, x + 30, y + 30]], float)


@pytest.mark.parametrize("laterality", ["L", "R"])
def test_layout_and_lesion_box_lands_on_the_lesion(laterality):
    cc = synthetic_view(laterality, "CC", 0.4)
    mlo = synthetic_view(laterality, "MLO", 0.6)
    result = breast_image(cc, mlo)
    assert result.image.shape == (1536, 1536) and result.image.dtype == np.float32
    assert result.placements["CC"].flipped == (laterality == "R")
    # CC tissue (0.4) fills the top half, MLO tissue (0.6) the bottom half
    assert np.median(result.image[:768][result.image[:768] > 0.1]) == pytest.approx(0.4, abs=0.02)
    assert np.median(result.image[768:][result.image[768:] > 0.1]) == pytest.approx(0.6, abs=0.02)
    for view, offset in (("CC", 0), ("MLO", 768)):
        box = result.boxes_from_source(view, lesion_source_box(laterality))[0]
        x0, y0, x1, y1 = np.round(box).astype(int)
        assert offset <= y0 < y1 <= offset + 768
        inside = result.image[y0:y1, x0:x1]
        assert inside.max() == pytest.approx(1.0, abs=0.02)
        # the box is the lesion's bounding box: its centre is lesion, its corners are not
        assert inside[inside.shape[0] // 2, inside.shape[1] // 2] > 0.95
        assert inside[0, 0] < 0.7 and inside[-1, -1] < 0.7
        # and the brightest pixels of that half lie inside the mapped box
        half = result.image[offset : offset + 768]
        bright_rows, bright_cols = np.nonzero(half > 0.95)
        assert (bright_cols.min() >= x0 - 1) and (bright_cols.max() <= x1 + 1)
        assert (bright_rows.min() + offset >= y0 - 1) and (bright_rows.max() + offset <= y1 + 1)


def test_left_and_right_give_the_same_picture_with_the_chest_wall_on_top():
    left = breast_image(synthetic_view("L", "CC", 0.4), synthetic_view("L", "MLO", 0.6))
    right = breast_image(synthetic_view("R", "CC", 0.4), synthetic_view("R", "MLO", 0.6))
    assert np.abs(left.image - right.image).max() < 1e-5
    placed_w, placed_h = left.placements["CC"].placed_size
    # chest wall along the top edge: the first row is tissue across the breast's extent,
    # the last placed row (nipple side) only in its middle
    assert (left.image[0, 5 : placed_w - 5] > 0.3).all()
    last = left.image[placed_h - 1, :placed_w]
    assert (last > 0.3).sum() < 0.2 * placed_w
    assert (left.image[:768, placed_w:] == 0).all()  # slot beyond the resized breast


def test_crop_leaves_out_background_and_markers():
    result = breast_image(synthetic_view("L", "CC", 0.4), synthetic_view("L", "MLO", 0.6))
    x0, y0, x1, y1 = result.placements["CC"].crop
    assert x0 == 0 and 500 <= x1 <= 560  # ellipse reaches x = 520
    assert 80 <= y0 <= 120 and 1120 <= y1 <= 1160  # rows 100 .. 1140


@pytest.mark.parametrize("view", ["CC", "MLO"])
def test_to_source_and_from_source_are_exact_inverses(view):
    result = breast_image(synthetic_view("R", "CC", 0.4), synthetic_view("R", "MLO", 0.6))
    rng = np.random.default_rng(3)
    source = rng.uniform([0, 0], [800, 1200], size=(50, 2))
    there = result.from_source(view, source)
    assert np.allclose(result.to_source(view, there), source, atol=1e-9)
    image_points = rng.uniform(0, 1536, size=(50, 2))
    assert np.allclose(result.from_source(view, result.to_source(view, image_points)), image_points)
    boxes = np.array([[10.0, 20.0, 110.0, 220.0]])
    round_trip = result.boxes_to_source(view, result.boxes_from_source(view, boxes))
    assert np.allclose(round_trip, boxes)


def test_custom_size_and_errors():
    cc, mlo = synthetic_view("L", "CC", 0.4), synthetic_view("L", "MLO", 0.6)
    small = breast_image(cc, mlo, size=(512, 256))
    assert small.image.shape == (512, 512)
    with pytest.raises(MedVLError, match="different breasts"):
        breast_image(cc, synthetic_view("R", "MLO", 0.6))
    with pytest.raises(MedVLError, match="'XX' is not in this breast image"):
        small.to_source("XX", [[0, 0]])


def test_sample_film_mammogram_is_cropped_to_the_breast(sample_file):
    mammogram = open_mammogram(sample_file("dicom/MG1_J2KI.dcm"))
    # the archive holds one view of this breast; its copy stands in for the CC view
    as_cc = dataclasses.replace(mammogram, path=mammogram.path.with_name("MG1_CC.dcm"), view="CC")
    result = breast_image(as_cc, mammogram)
    x0, _, x1, _ = result.placements["MLO"].crop
    assert x0 == 0 and x1 < 2600  # the film's dark background on the right is cut away
    assert not result.placements["MLO"].flipped  # a left breast, chest wall already on the left
    assert result.image.shape == (1536, 1536)


@pytest.mark.parametrize(
    ("laterality", "photometric"), [("L", "MONOCHROME1"), ("R", "MONOCHROME2")]
)
def test_synthetic_dicom_case_boxes_land_on_their_lesions(tmp_path, laterality, photometric):
    from medvl_engine.synthetic import make_mammogram_case

    case = make_mammogram_case(
        tmp_path, seed=11, laterality=laterality, findings=["mass"], photometric=photometric
    )
    cc, mlo = open_mammogram(case.cc_path), open_mammogram(case.mlo_path)
    assert (cc.laterality, cc.view, mlo.view) == (laterality, "CC", "MLO")
    result = breast_image(cc, mlo)
    for view, offset in (("CC", 0), ("MLO", 768)):
        placement = result.placements[view]
        assert placement.flipped == (laterality == "R")
        source = cc if view == "CC" else mlo
        mask = case.breast_masks.get(view)
        if mask is not None:  # the crop keeps all visible breast tissue
            rows, cols = np.nonzero(mask & (source.pixels > 0.1))
            x0, y0, x1, y1 = placement.crop
            assert x0 <= cols.min() and cols.max() < x1
            assert y0 <= rows.min() and rows.max() < y1
        for box in case.boxes[view]:
            sx0, sy0, sx1, sy1 = box
            lesion_source = source.pixels[sy0:sy1, sx0:sx1].mean()
            mapped = np.round(result.boxes_from_source(view, [box])[0]).astype(int)
            bx0, by0, bx1, by1 = mapped
            assert offset <= by0 < by1 <= offset + 768
            lesion_image = result.image[by0:by1, bx0:bx1].mean()
            # the same structure: the mapped box holds what the source box held
            assert lesion_image == pytest.approx(lesion_source, abs=0.05)
            ring = result.image[max(by0 - 20, offset) : by1 + 20, max(bx0 - 20, 0) : bx1 + 20]
            assert lesion_image > ring.mean()
