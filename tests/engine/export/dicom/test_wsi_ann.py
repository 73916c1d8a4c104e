"""Top patches of a DICOM WSI as Microscopy Bulk Simple Annotations: valid, exact, private."""

from __future__ import annotations

import shutil
import subprocess

import highdicom as hd
import numpy as np
import pydicom
import pytest

from medvl_engine.errors import ExportError
from medvl_engine.export.dicom import leaked_paths, write_top_patches_annotations
from medvl_engine.io.dicom_results import read_dicom_result

BOXES = np.array([[64, 32, 96, 64], [160, 96, 192, 128], [0, 256, 32, 288]])
SCORES = np.array([0.91, 0.62, 0.40])


@pytest.mark.parametrize("coordinates", ["2D", "3D"])
def test_boxes_come_back_as_rectangles_with_rank_and_score(wsi, tmp_path, coordinates):
    out = write_top_patches_annotations(
        tmp_path / "top.dcm",
        BOXES,
        SCORES,
        wsi[0],
        prompt="tumor",
        model="medvl-demo",
        coordinates=coordinates,
    )
    ann = hd.ann.annread(out)  # highdicom reads it back on its own
    (group,) = ann.get_annotation_groups()
    assert group.graphic_type == hd.ann.GraphicTypeValues.POLYGON
    assert group.algorithm_type == hd.ann.AnnotationGroupGenerationTypeValues.AUTOMATIC
    assert group.algorithm_identification[0].AlgorithmName == "medvl-demo"
    assert "not for diagnosis" in group.AnnotationGroupDescription
    names, values, _ = group.get_measurements()
    assert [n.meaning for n in names] == ["Prompt score", "Rank"]
    np.testing.assert_allclose(values[:, 0], SCORES, rtol=1e-6)
    result = read_dicom_result(out, source=wsi[0])
    (shapes,) = result.shapes
    assert shapes.shape_type == "rectangle"
    for box, corners in zip(BOXES, shapes.shapes, strict=True):
        np.testing.assert_allclose(corners.min(0), box[:2], atol=1e-6)
        np.testing.assert_allclose(corners.max(0), box[2:], atol=1e-6)
    assert shapes.labels == ["#1 0.91", "#2 0.62", "#3 0.4"]
    assert result.placed_on == pydicom.dcmread(wsi[0], stop_before_pixels=True).SOPInstanceUID


def test_new_uids_and_no_path_of_this_machine(wsi, tmp_path):
    model = tmp_path / "models" / "tuned"
    out = write_top_patches_annotations(tmp_path / "a.dcm", BOXES, SCORES, wsi[0], model=model)
    again = write_top_patches_annotations(tmp_path / "b.dcm", BOXES, SCORES, wsi[0], model=model)
    first, second = pydicom.dcmread(out), pydicom.dcmread(again)
    assert first.SOPInstanceUID != second.SOPInstanceUID
    assert first.SeriesInstanceUID != second.SeriesInstanceUID
    text = [
        str(e.value) for e in first.iterall() if e.VR not in ("SQ", "OB", "OF", "OD", "OL", "UN")
    ]
    assert not any(str(tmp_path) in value for value in text)
    assert any(value == "tuned" for value in text)
    assert leaked_paths(first, [tmp_path, wsi[0].parent]) == []


def test_a_tiff_slide_is_refused_before_anything_is_written(write_svs, tmp_path):
    svs = write_svs(tmp_path / "slide.svs", np.zeros((64, 64, 3), np.uint8), tile=64)
    with pytest.raises(ExportError, match="DICOM outputs need a DICOM source"):
        write_top_patches_annotations(tmp_path / "top.dcm", BOXES, SCORES, svs)
    assert not (tmp_path / "top.dcm").exists()


@pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)
def test_dciodvfy_finds_no_error_in_slide_coordinates(wsi, tmp_path):
    out = write_top_patches_annotations(
        tmp_path / "top.dcm", BOXES, SCORES, wsi[0], coordinates="3D"
    )
    assert pydicom.dcmread(out).AnnotationCoordinateType == "3D"
    report = subprocess.run(["dciodvfy", str(out)], capture_output=True, text=True, timeout=60)
    assert [line for line in report.stderr.splitlines() if line.startswith("Error")] == []


@pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)
def test_dciodvfy_on_image_coordinates_reports_only_its_common_z_false_alarm(wsi, tmp_path):
    """dicom3tools 1.00~20220618 reports a missing Common Z Coordinate Value as "only valid
    for 3D" even on 2D annotations, where the attribute must be absent (it is)."""
    out = write_top_patches_annotations(tmp_path / "top.dcm", BOXES, SCORES, wsi[0])
    assert pydicom.dcmread(out).AnnotationCoordinateType == "2D"  # the default
    assert "CommonZCoordinateValue" not in pydicom.dcmread(out).AnnotationGroupSequence[0]
    report = subprocess.run(["dciodvfy", str(out)], capture_output=True, text=True, timeout=60)
    errors = [line for line in report.stderr.splitlines() if line.startswith("Error")]
    assert all("<CommonZCoordinateValue> = <>" in line for line in errors)
