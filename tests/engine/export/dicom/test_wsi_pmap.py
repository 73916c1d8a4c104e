"""A prompt heatmap of a DICOM WSI as a Parametric Map: valid, aligned, exact, private."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pydicom
import pytest

from medvl_engine.errors import ExportError
from medvl_engine.export.dicom import leaked_paths, write_heatmap_parametric_map
from medvl_engine.heatmap import Heatmap
from medvl_engine.io.dicom_results import read_dicom_result
from tests.support.dicom_wsi import ORIGIN_MM

CELL = 32
ORIGIN = (64, 32)  # level-0 px of the grid's first cell: a multiple of the patch step


def _heatmap(origin=ORIGIN, model="medvl-demo") -> tuple[Heatmap, np.ndarray, np.ndarray]:
    """A 3 x 4 grid of non-overlapping patches (one per cell), one without a score."""
    rows, cols = 3, 4
    coords = np.array(
        [(origin[0] + c * CELL, origin[1] + r * CELL) for r in range(rows) for c in range(cols)]
    )
    scores = np.linspace(-0.3, 0.8, rows * cols).astype(np.float32)
    grid = scores.reshape(rows, cols).copy()
    grid[0, 0] = np.nan  # no tissue
    heatmap = Heatmap(
        grid=grid,
        scores=scores,
        origin_level0=origin,
        cell_size_level0=CELL,
        scale=(CELL * 0.5, CELL * 0.5),
        translate=(0.0, 0.0),
        units="um",
        prompt="invasive carcinoma",
        value_range=(-0.3, 0.8),
        metadata={"encoder": model},
    )
    return heatmap, coords, scores


def _strings(dataset) -> list[str]:
    found = []
    for element in dataset.iterall():
        if element.VR in ("SQ", "OB", "OW", "OF", "OD", "UN"):
            continue
        found.extend(str(v) for v in (element.value if element.VM > 1 else [element.value]))
    return found


def test_pm_values_are_the_scores_at_each_patch_on_the_source_grid(wsi, tmp_path):
    heatmap, coords, scores = _heatmap()
    out = write_heatmap_parametric_map(tmp_path / "map.dcm", heatmap, wsi[1])  # any level
    result = read_dicom_result(out, source=wsi[0])
    (image,) = result.images
    assert image.pixel_size == pytest.approx((CELL, CELL))
    assert image.origin == pytest.approx((0.0, 0.0))  # at the source origin
    assert image.values.shape == (-(-300 // CELL), -(-400 // CELL))
    for (x, y), score in list(zip(coords, scores, strict=True))[1:]:
        assert image.values[y // CELL, x // CELL] == score
    assert np.isnan(image.values[ORIGIN[1] // CELL, ORIGIN[0] // CELL])
    assert np.isfinite(image.values).sum() == len(scores) - 1
    source = pydicom.dcmread(wsi[0], stop_before_pixels=True)
    pm = pydicom.dcmread(out)
    assert pm.FrameOfReferenceUID == source.FrameOfReferenceUID
    assert pm.StudyInstanceUID == source.StudyInstanceUID
    assert pm.DimensionOrganizationType == "TILED_SPARSE"
    assert (
        pm.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0].PixelSpacing
        == [pytest.approx(CELL * 0.0005)] * 2
    )
    origin = pm.TotalPixelMatrixOriginSequence[0]
    assert (origin.XOffsetInSlideCoordinateSystem, origin.YOffsetInSlideCoordinateSystem) == (
        pytest.approx(ORIGIN_MM[0]),
        pytest.approx(ORIGIN_MM[1]),
    )
    assert pm.ReferencedSeriesSequence[0].ReferencedInstanceSequence[
        0
    ].ReferencedSOPInstanceUID == (source.SOPInstanceUID)
    assert result.description == "demo model trained on synthetic data, not for diagnosis"
    assert result.algorithm == ["medvl-demo medvl 0.1.0"] or result.algorithm[0].startswith(
        "medvl-demo medvl "
    )


def test_a_grid_off_the_patch_step_is_placed_by_its_remainder(wsi, tmp_path):
    heatmap, coords, scores = _heatmap(origin=(70, 40))
    out = write_heatmap_parametric_map(tmp_path / "map.dcm", heatmap, wsi[0])
    (image,) = read_dicom_result(out, source=wsi[0]).images
    assert image.origin == pytest.approx((70 % CELL, 40 % CELL))
    x, y = coords[5]
    column, row = (x - 70 % CELL) // CELL, (y - 40 % CELL) // CELL
    assert image.values[row, column] == scores[5]


def test_each_write_has_new_uids_and_no_path_of_this_machine(wsi, tmp_path):
    heatmap, _, _ = _heatmap(model=str(tmp_path / "models" / "my-model"))
    first = pydicom.dcmread(write_heatmap_parametric_map(tmp_path / "a.dcm", heatmap, wsi[0]))
    second = pydicom.dcmread(write_heatmap_parametric_map(tmp_path / "b.dcm", heatmap, wsi[0]))
    assert first.SOPInstanceUID != second.SOPInstanceUID
    assert first.SeriesInstanceUID != second.SeriesInstanceUID
    source = pydicom.dcmread(wsi[0], stop_before_pixels=True)
    assert first.SOPInstanceUID != source.SOPInstanceUID
    assert first.SeriesInstanceUID != source.SeriesInstanceUID
    text = _strings(first)
    assert not any(str(tmp_path) in value or "/" in value for value in text)
    assert "my-model" in text  # the folder's name names the model
    assert leaked_paths(first, [tmp_path, wsi[0].parent]) == []
    assert first.ContentDescription != "demo model trained on synthetic data, not for diagnosis"


def test_non_dicom_slides_are_refused_in_one_sentence(write_svs, tmp_path):
    heatmap, _, _ = _heatmap()
    svs = write_svs(tmp_path / "slide.svs", np.zeros((64, 64, 3), np.uint8), tile=64)
    with pytest.raises(ExportError, match="DICOM outputs need a DICOM source") as caught:
        write_heatmap_parametric_map(tmp_path / "map.dcm", heatmap, svs)
    assert "slide.svs is not a DICOM whole-slide image" in str(caught.value)
    assert str(caught.value).count(". ") == 0
    assert not (tmp_path / "map.dcm").exists()


@pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)
def test_dciodvfy_finds_no_error_in_the_default_tiled_sparse_map(wsi, tmp_path):
    heatmap, _, _ = _heatmap()
    out = write_heatmap_parametric_map(tmp_path / "map.dcm", heatmap, wsi[0])
    assert pydicom.dcmread(out, stop_before_pixels=True).DimensionOrganizationType == (
        "TILED_SPARSE"
    )
    report = subprocess.run(["dciodvfy", str(out)], capture_output=True, text=True, timeout=60)
    errors = [line for line in report.stderr.splitlines() if line.startswith("Error")]
    assert errors == []
    (image,) = read_dicom_result(out, source=wsi[0]).images
    assert np.isfinite(image.values).sum() == 11


# dicom3tools 1.00~20220618 (Debian 12) predates TILED_FULL parametric maps, in which the
# standard now omits per-frame positions; these four lines, and only these, are its verdict.
_TILED_FULL_UNKNOWN_TO_OLD_DCIODVFY = {
    f"Error - Missing attribute Type 1 Required Element=<{element}> Module=<{module}>"
    for element, module in (
        ("PlanePositionSequence", "PlanePositionMacro"),
        ("PlaneOrientationSequence", "PlaneOrientationMacro"),
        ("PlanePositionSlideSequence", "PlanePositionSlideMacro"),
        ("PerFrameFunctionalGroupsSequence", "MultiFrameFunctionalGroupsForParametricMap"),
    )
}


@pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)
def test_dciodvfy_finds_only_the_missing_per_frame_positions_tiled_full_omits(wsi, tmp_path):
    heatmap, _, _ = _heatmap()
    out = write_heatmap_parametric_map(
        tmp_path / "map.dcm", heatmap, wsi[0], organization="TILED_FULL"
    )
    report = subprocess.run(["dciodvfy", str(out)], capture_output=True, text=True, timeout=60)
    errors = {line for line in report.stderr.splitlines() if line.startswith("Error")}
    assert errors <= _TILED_FULL_UNKNOWN_TO_OLD_DCIODVFY


def test_a_pyramid_shares_series_and_pyramid_and_halves_by_nan_aware_means(wsi, tmp_path):
    from medvl_engine.export.dicom.wsi_pmap import halve_map, write_heatmap_parametric_map_pyramid

    heatmap, _, _ = _heatmap()
    paths = write_heatmap_parametric_map_pyramid(tmp_path / "map.dcm", heatmap, wsi[0], levels=3)
    assert [p.name for p in paths] == ["map.dcm", "map-level1.dcm", "map-level2.dcm"]
    headers = [pydicom.dcmread(p, stop_before_pixels=True) for p in paths]
    assert len({h.SeriesInstanceUID for h in headers}) == 1
    assert len({h.PyramidUID for h in headers}) == 1
    assert [int(h.InstanceNumber) for h in headers] == [1, 2, 3]
    images = [read_dicom_result(p, source=wsi[0]).images[0] for p in paths]
    assert [i.pixel_size for i in images] == [
        (CELL, CELL),
        (2 * CELL, 2 * CELL),
        (4 * CELL, 4 * CELL),
    ]
    assert all(i.origin == pytest.approx((0.0, 0.0)) for i in images)
    np.testing.assert_array_equal(images[1].values, halve_map(images[0].values))
    block = images[0].values[0:2, 2:4]  # three cells without a value, one score
    assert np.isnan(block).sum() == 3
    assert images[1].values[0, 1] == pytest.approx(float(np.nanmax(block)))  # NaN ignored
    assert np.isnan(images[1].values[0, 0])  # a block without any value stays empty
