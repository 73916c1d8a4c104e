"""The mammography SR, presentation states and parametric maps medvl writes for a TopK run
read back onto their views: the boxes where the run put them, with rank and score."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest

from medvl_engine.io.dicom_results import read_dicom_result

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def topk_objects(tmp_path_factory):
    from medvl_engine.export.dicom import write_topk_dicom
    from medvl_engine.mammography import topk
    from medvl_engine.synthetic import make_mammogram_case

    folder = tmp_path_factory.mktemp("mammo")
    case = make_mammogram_case(folder, seed=3, size=(512, 320))
    run = topk(case.cc_path, case.mlo_path, "topksiglip-demo")
    paths = {p.name: p for p in write_topk_dicom(run, folder / "out", model_name="topksiglip-demo")}
    return case, run, paths


def _uid(path) -> str:
    return str(pydicom.dcmread(path, stop_before_pixels=True).SOPInstanceUID)


def test_sr_boxes_are_the_runs_boxes_on_each_view(topk_objects):
    case, run, paths = topk_objects
    result = read_dicom_result(paths["topk_sr.dcm"])
    by_view = {s.source_uid: s for s in result.shapes}
    for view, path in (("CC", case.cc_path), ("MLO", case.mlo_path)):
        shapes = by_view[_uid(path)]
        assert shapes.shape_type == "rectangle"
        boxes = np.array([[*s.min(0), *s.max(0)] for s in shapes.shapes])
        np.testing.assert_allclose(boxes, run.result.boxes[view], atol=1e-3)
        assert all(label.startswith("#") for label in shapes.labels)


def test_presentation_state_text_carries_rank_and_score(topk_objects):
    case, run, paths = topk_objects
    result = read_dicom_result(paths["topk_CC_pr.dcm"], source=case.cc_path)
    shapes = {s.name: s for s in result.shapes}
    boxes = np.array([[*s.min(0), *s.max(0)] for s in shapes["TOPK"].shapes])
    np.testing.assert_allclose(boxes, run.result.boxes["CC"], atol=1e-3)
    assert shapes["TOPK text"].labels[0].startswith("#1 ")
    assert any("not for diagnosis" in text for text in shapes["NOTICE text"].labels)


def test_parametric_map_lies_on_its_view_pixel_for_pixel(topk_objects):
    case, _, paths = topk_objects
    result = read_dicom_result(paths["topk_CC_pm.dcm"], source=case.cc_path)
    (image,) = result.images
    source = pydicom.dcmread(case.cc_path, stop_before_pixels=True)
    assert image.values.shape == (source.Rows, source.Columns)
    assert (image.origin, image.pixel_size) == ((0.0, 0.0), (1.0, 1.0))
    assert image.source_uid == source.SOPInstanceUID
    assert np.nanmax(image.values) > 0
