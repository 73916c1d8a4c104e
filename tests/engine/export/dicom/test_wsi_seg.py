"""A tissue map and a heatmap of a DICOM WSI as DICOM Segmentations: each class's segment is
exactly its cells, the heatmap's fractions are its scores mapped as stated, both are valid
and new objects that name no folder of this machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest

from medvl_engine.errors import ExportError

hd = pytest.importorskip("highdicom")

from medvl_engine.export.dicom import leaked_paths  # noqa: E402
from medvl_engine.export.dicom.wsi_seg import (  # noqa: E402
    fraction_mapping,
    write_class_map_segmentation,
    write_heatmap_segmentation,
)
from medvl_engine.export.regions import class_colors  # noqa: E402
from medvl_engine.heatmap import Heatmap  # noqa: E402
from medvl_engine.io.dicom_results import read_dicom_result  # noqa: E402
from medvl_engine.io.dicom_results.describe import describe_result  # noqa: E402
from tests.engine.export.dicom.mammo_fixtures import dciodvfy_errors  # noqa: E402
from tests.engine.export.dicom.segment_fixtures import (  # noqa: E402
    NAMES,
    ORIGIN,
    labels_on_source_grid,
    segment_result,
)

needs_dciodvfy = pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)


@pytest.fixture(scope="module")
def class_seg(wsi, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seg") / "map.dcm"
    return write_class_map_segmentation(out, segment_result(), wsi[0])


def _heatmap(mode: str, value_range: tuple[float, float]) -> Heatmap:
    grid = np.full((9, 12), np.nan, np.float32)
    low, high = value_range
    grid[1:8, 1:11] = np.linspace(low, high, 70, dtype=np.float32).reshape(7, 10)
    return Heatmap(
        grid=grid,
        scores=grid[np.isfinite(grid)],
        origin_level0=ORIGIN,
        cell_size_level0=32,
        scale=(16.0, 16.0),
        translate=(0.0, 0.0),
        units="um",
        mode=mode,
        prompt="tumor",
        value_range=value_range,
        metadata={"encoder": "medvl-demo"},
    )


def test_each_class_segment_is_exactly_its_cells_and_uncertain_is_in_none(class_seg, wsi):
    seg = hd.seg.segread(class_seg)  # highdicom reads it back on its own
    assert seg.SegmentationType == "BINARY"
    grid = labels_on_source_grid()
    masks = seg.get_total_pixel_matrix(dtype=np.uint8)  # [rows, cols, segments]
    assert masks.shape == (*grid.shape, len(NAMES))
    for number, name in enumerate(NAMES, start=1):
        np.testing.assert_array_equal(masks[..., number - 1], grid == number, err_msg=name)
    uncertain = grid == len(NAMES) + 1
    assert uncertain.sum() == 12 and not masks[uncertain].any()
    assert [s.SegmentLabel for s in seg.SegmentSequence] == NAMES
    # read back onto the source: same masks, placed on its level 0, one cell = 32 px
    result = read_dicom_result(class_seg, source=wsi[0])
    assert result.placed_on == pydicom.dcmread(wsi[0], stop_before_pixels=True).SOPInstanceUID
    colours = class_colors(len(NAMES))  # the GeoJSON's and PNG's colours, via CIELab
    for number, image in enumerate(result.images, start=1):
        assert (image.name, image.color) == (NAMES[number - 1], colours[number - 1])
        assert (image.origin, image.pixel_size) == ((0.0, 0.0), (32.0, 32.0))
        np.testing.assert_array_equal(image.values, grid == number)
    lines = describe_result(result)
    assert any("'breast tumor'" in line for line in lines)
    assert any("level-0 px of the source" in line for line in lines)


def test_segments_name_codes_colours_and_the_algorithm(class_seg):
    dataset = pydicom.dcmread(class_seg)
    tumor, stroma, fat = dataset.SegmentSequence
    codes = [s.SegmentedPropertyTypeCodeSequence[0] for s in (tumor, stroma, fat)]
    assert [(c.CodingSchemeDesignator, c.CodeValue) for c in codes] == [
        ("SCT", "108369006"),  # Neoplasm
        ("99MEDVL", codes[1].CodeValue),  # no SNOMED code for stroma: private, named
        ("SCT", "55603005"),  # Adipose tissue
    ]
    assert codes[1].CodeMeaning == "breast stroma"
    assert tumor.SegmentedPropertyCategoryCodeSequence[0].CodeValue == "49755003"
    colours = [tuple(s.RecommendedDisplayCIELabValue) for s in (tumor, stroma, fat)]
    assert len(set(colours)) == 3
    algorithm = tumor.SegmentationAlgorithmIdentificationSequence[0]
    assert (algorithm.AlgorithmName, algorithm.AlgorithmVersion[:6]) == ("medvl-demo", "medvl ")
    parameters = json.loads(algorithm.AlgorithmParameters)
    assert parameters["classes"]["breast tumor"] == ["breast tumor", "breast carcinoma"]
    assert parameters["templates"] == ["an image of {}.", "{}, H&E."]
    assert parameters["min_confidence"] == 0.5
    assert "not for diagnosis" in dataset.ContentDescription


def test_the_heatmap_fractions_are_its_scores_mapped_as_stated(wsi, tmp_path):
    heatmap = _heatmap("cosine", (-0.3, 0.8))
    assert fraction_mapping(heatmap) == (-0.8, 0.8)  # the signed map's display range
    out = write_heatmap_segmentation(tmp_path / "heat.dcm", heatmap, wsi[0])
    dataset = pydicom.dcmread(out)
    assert (dataset.SegmentationType, dataset.SegmentationFractionalType) == (
        "FRACTIONAL",
        "PROBABILITY",
    )
    (segment,) = dataset.SegmentSequence
    assert segment.SegmentDescription == "f = clip((s + 0.8) / 1.6, 0, 1); no patch: 0"
    assert segment.SegmentLabel == "tumor"
    (image,) = read_dicom_result(out, source=wsi[0]).images
    expected = np.zeros((10, 13))
    with np.errstate(invalid="ignore"):
        expected[:9, 1:] = np.nan_to_num(np.clip((heatmap.grid + 0.8) / 1.6, 0, 1))
    assert image.values.shape == expected.shape and image.unit == "probability"
    np.testing.assert_allclose(image.values, expected, atol=0.5 / 255 + 1e-6)
    assert np.abs(image.values - expected).max() > 0  # stored in 1/255 steps


def test_a_probability_map_is_stored_as_it_is(wsi, tmp_path):
    heatmap = _heatmap("softmax", (0.0, 1.0))
    assert fraction_mapping(heatmap) == (0.0, 1.0)
    out = write_heatmap_segmentation(tmp_path / "p.dcm", heatmap, wsi[0])
    assert (
        pydicom.dcmread(out)
        .SegmentSequence[0]
        .SegmentDescription.startswith("f = clip((s - 0) / 1, 0, 1)")
    )
    (image,) = read_dicom_result(out, source=wsi[0]).images
    np.testing.assert_allclose(
        image.values[:9, 1:], np.nan_to_num(heatmap.grid), atol=0.5 / 255 + 1e-6
    )


def test_new_uids_and_no_path_of_this_machine(wsi, tmp_path):
    model = tmp_path / "models" / "tuned"
    first = write_class_map_segmentation(tmp_path / "a.dcm", segment_result(model), wsi[0])
    second = write_heatmap_segmentation(tmp_path / "b.dcm", _heatmap("cosine", (0, 1)), wsi[0])
    source = pydicom.dcmread(wsi[0], stop_before_pixels=True)
    a, b = pydicom.dcmread(first), pydicom.dcmread(second)
    uids = {a.SOPInstanceUID, a.SeriesInstanceUID, b.SOPInstanceUID, b.SeriesInstanceUID}
    assert len(uids) == 4 and source.SOPInstanceUID not in uids
    assert source.SeriesInstanceUID not in uids
    assert (a.StudyInstanceUID, a.FrameOfReferenceUID) == (
        source.StudyInstanceUID,
        source.FrameOfReferenceUID,
    )
    assert leaked_paths(a, [tmp_path, wsi[0].parent]) == []
    assert leaked_paths(b, [tmp_path, wsi[0].parent]) == []
    algorithm = a.SegmentSequence[0].SegmentationAlgorithmIdentificationSequence[0]
    assert algorithm.AlgorithmName == "tuned"


def test_a_tiff_slide_is_refused_before_anything_is_written(write_svs, tmp_path):
    svs = write_svs(tmp_path / "slide.svs", np.zeros((64, 64, 3), np.uint8), tile=64)
    with pytest.raises(ExportError, match="DICOM outputs need a DICOM source"):
        write_class_map_segmentation(tmp_path / "m.dcm", segment_result(), svs)
    with pytest.raises(ExportError, match="slide.svs is not a DICOM whole-slide image"):
        write_heatmap_segmentation(tmp_path / "h.dcm", _heatmap("cosine", (0, 1)), svs)
    assert list(tmp_path.glob("*.dcm")) == []


@needs_dciodvfy
def test_dciodvfy_finds_no_error_in_either_segmentation(class_seg, wsi, tmp_path):
    heat = write_heatmap_segmentation(tmp_path / "h.dcm", _heatmap("cosine", (-1, 1)), wsi[0])
    assert dciodvfy_errors(class_seg) == []
    assert dciodvfy_errors(heat) == []
