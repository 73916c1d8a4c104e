"""The regions of a tissue map of a DICOM WSI as Microscopy Bulk Simple Annotations: one
group per class, each region's outline as a polygon within half a pixel of its level-0
outline and inside the slide, its area as a measurement; valid, new and private."""

from __future__ import annotations

import shutil

import numpy as np
import pydicom
import pytest

from medvl_engine.errors import ExportError

hd = pytest.importorskip("highdicom")

from medvl_engine.export.dicom import leaked_paths  # noqa: E402
from medvl_engine.export.dicom.wsi_ann import write_regions_annotations  # noqa: E402
from medvl_engine.io.dicom_results import read_dicom_result  # noqa: E402
from tests.engine.export.dicom.mammo_fixtures import dciodvfy_errors  # noqa: E402
from tests.engine.export.dicom.segment_fixtures import (  # noqa: E402
    NAMES,
    SLIDE_SIZE,
    segment_result,
)

needs_dciodvfy = pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)


@pytest.mark.parametrize("coordinates", ["2D", "3D"])
def test_each_region_outline_comes_back_within_half_a_pixel(wsi, tmp_path, coordinates):
    result = segment_result()
    out = write_regions_annotations(tmp_path / "r.dcm", result, wsi[0], coordinates=coordinates)
    ann = hd.ann.annread(out)  # highdicom reads it back on its own
    groups = ann.get_annotation_groups()
    assert [g.label for g in groups] == ["breast tumor", "breast stroma"]  # fat has no cell
    kept = [r for r in result.regions if r.name in NAMES]
    assert {r.name for r in result.regions} - {r.name for r in kept} == {"uncertain"}
    back = read_dicom_result(out, source=wsi[0])
    assert back.placed_on == pydicom.dcmread(wsi[0], stop_before_pixels=True).SOPInstanceUID
    assert [s.name for s in back.shapes] == ["breast tumor", "breast stroma"]
    for shapes in back.shapes:
        mine = [r for r in kept if r.name == shapes.name]
        assert len(shapes.shapes) == len(mine)
        for polygon, region in zip(shapes.shapes, mine, strict=True):
            outline = region.rings[0][:-1]  # the ring without its closing point
            assert polygon.shape == outline.shape
            assert np.abs(polygon - outline).max() <= 0.5
            assert polygon.min() >= 0
            assert (polygon.max(axis=0) <= np.asarray(SLIDE_SIZE)).all()
        (area,) = [v for k, v in shapes.values.items() if k.startswith("Area")]
        np.testing.assert_allclose(area, [r.area_um2 for r in mine], rtol=1e-6)
    tumor = next(r for r in kept if r.name == "breast tumor")
    assert len(tumor.rings) == 2  # the stroma island is a hole: not drawn, subtracted
    # 26 cells of 32 x 32 px at 0.25 um^2 per px; the smoothed outline rounds the corners
    assert tumor.area_um2 == pytest.approx(26 * 32 * 32 * 0.25, rel=0.05)


def test_groups_carry_codes_colours_and_the_model(wsi, tmp_path):
    out = write_regions_annotations(tmp_path / "r.dcm", segment_result(), wsi[0])
    dataset = pydicom.dcmread(out)
    tumor, stroma = dataset.AnnotationGroupSequence
    assert tumor.AnnotationPropertyTypeCodeSequence[0].CodeValue == "108369006"
    assert stroma.AnnotationPropertyTypeCodeSequence[0].CodingSchemeDesignator == "99MEDVL"
    assert tumor.RecommendedDisplayCIELabValue != stroma.RecommendedDisplayCIELabValue
    assert tumor.AnnotationGroupAlgorithmIdentificationSequence[0].AlgorithmName == "medvl-demo"
    assert "not for diagnosis" in tumor.AnnotationGroupDescription
    assert tumor.GraphicType == "POLYGON"


def test_new_uids_and_no_path_of_this_machine(wsi, tmp_path):
    model = tmp_path / "models" / "tuned"
    first = write_regions_annotations(tmp_path / "a.dcm", segment_result(model), wsi[0])
    second = write_regions_annotations(tmp_path / "b.dcm", segment_result(model), wsi[0])
    a, b = pydicom.dcmread(first), pydicom.dcmread(second)
    assert a.SOPInstanceUID != b.SOPInstanceUID and a.SeriesInstanceUID != b.SeriesInstanceUID
    assert leaked_paths(a, [tmp_path, wsi[0].parent]) == []
    group = a.AnnotationGroupSequence[0]
    assert group.AnnotationGroupAlgorithmIdentificationSequence[0].AlgorithmName == "tuned"


def test_a_map_without_class_regions_and_a_tiff_slide_are_refused(wsi, write_svs, tmp_path):
    empty = segment_result()
    empty.regions = [r for r in empty.regions if r.name == "uncertain"]
    with pytest.raises(ExportError, match="no class has a region"):
        write_regions_annotations(tmp_path / "e.dcm", empty, wsi[0])
    svs = write_svs(tmp_path / "slide.svs", np.zeros((64, 64, 3), np.uint8), tile=64)
    with pytest.raises(ExportError, match="slide.svs is not a DICOM whole-slide image"):
        write_regions_annotations(tmp_path / "s.dcm", segment_result(), svs)
    assert list(tmp_path.glob("*.dcm")) == []


@needs_dciodvfy
def test_dciodvfy_finds_no_error_in_slide_coordinates(wsi, tmp_path):
    out = write_regions_annotations(tmp_path / "r.dcm", segment_result(), wsi[0], coordinates="3D")
    assert dciodvfy_errors(out) == []
    flat = write_regions_annotations(tmp_path / "f.dcm", segment_result(), wsi[0])
    # dicom3tools 1.00~20220618 reports the Common Z Coordinate Value that 2D must leave out
    assert all("<CommonZCoordinateValue> = <>" in line for line in dciodvfy_errors(flat))
