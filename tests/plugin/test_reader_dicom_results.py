"""The reader opens DICOM result objects as layers, on their slide when it is open."""

from __future__ import annotations

import numpy as np
import pytest
from napari.components import ViewerModel

from napari_medvl._reader import read_paths
from tests.support.slide_results import CELL, write_slide_with_results


@pytest.fixture(autouse=True, scope="module")
def _discover_plugins():
    import npe2

    npe2.PluginManager.instance().discover()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    files, pm, ann = write_slide_with_results(tmp_path_factory.mktemp("dicom"), levels=1)
    return files[0], pm, ann


def test_results_alone_are_drawn_in_source_px_or_micrometres(results):
    _, pm, ann = results
    (image,) = [layer for layer in read_paths(str(pm)) if layer[2] == "image"]
    data, kwargs, _ = image
    assert data.shape == (8, 10)
    assert kwargs["scale"] == pytest.approx((CELL * 0.5, CELL * 0.5))  # slide not beside: um
    assert kwargs["units"] == ("um", "um")
    assert kwargs["metadata"]["colormap"] and kwargs["metadata"]["medvl_result"] == "PM"
    ((shapes, shape_kwargs, kind),) = read_paths(str(ann))
    assert kind == "shapes" and shape_kwargs["shape_type"] == "rectangle"
    np.testing.assert_allclose(shapes[0].min(0), [64, 32])  # (y, x) of box 1's corner
    assert shape_kwargs["features"]["label"] == ["#1 0.9", "#2 0.7"]


def test_results_land_on_their_open_slide_in_micrometres(results, monkeypatch):
    level0, pm, ann = results
    viewer = ViewerModel()
    viewer.add_layer(__import__("napari").layers.Layer.create(*read_paths(str(level0))[0]))
    monkeypatch.setattr("napari.current_viewer", lambda: viewer)
    ((shapes, kwargs, _),) = read_paths(str(ann))
    np.testing.assert_allclose(shapes[0].min(0), [64 * 0.5, 32 * 0.5])  # (y, x) um, mpp 0.5
    assert kwargs["metadata"]["placed_on"]
    (image,) = read_paths(str(pm))
    assert image[1]["scale"] == (CELL * 0.5, CELL * 0.5)
    assert image[1]["translate"] == (CELL * 0.25, CELL * 0.25)
    assert image[1]["metadata"]["slide"] is not None


@pytest.mark.slow
def test_topk_report_boxes_land_on_their_own_mammogram_views(tmp_path, monkeypatch):
    from napari.layers import Layer

    from medvl_engine.export.dicom import write_topk_dicom
    from medvl_engine.mammography import topk
    from medvl_engine.synthetic import make_mammogram_case

    case = make_mammogram_case(tmp_path, seed=3, size=(512, 320))
    run = topk(case.cc_path, case.mlo_path, "topksiglip-demo")
    written = {
        p.name: p for p in write_topk_dicom(run, tmp_path / "out", model_name="topksiglip-demo")
    }
    viewer = ViewerModel()
    monkeypatch.setattr("napari.current_viewer", lambda: viewer)
    for view in read_paths([str(case.cc_path), str(case.mlo_path)]):
        viewer.add_layer(Layer.create(*view))
    offsets = {
        layer.metadata["path"]: layer.metadata["world_frame"]["offset_x"] for layer in viewer.layers
    }
    layers = read_paths(str(written["topk_sr.dcm"]))
    assert len(layers) == 2
    for (rectangles, kwargs, kind), view in zip(layers, ("CC", "MLO"), strict=True):
        path = str(case.cc_path if view == "CC" else case.mlo_path)
        assert kind == "shapes" and kwargs["shape_type"] == "rectangle"
        first = rectangles[0]  # (y, x) world corners of the view's best box
        x0, y0 = run.result.boxes[view][0][:2]
        np.testing.assert_allclose(first.min(0), [y0, x0 + offsets[path]], atol=1e-3)
    (pm,) = read_paths(str(written["topk_MLO_pm.dcm"]))
    assert pm[1]["translate"][1] == pytest.approx(offsets[str(case.mlo_path)] + 0.5)


def test_a_segmentation_opens_through_napari_as_labels_on_its_slide(results, tmp_path, monkeypatch):
    import highdicom as hd
    import pydicom
    from pydicom.sr.codedict import codes

    level0, _, _ = results
    source = pydicom.dcmread(level0)
    mask = np.zeros((256, 320), bool)
    mask[64:128, 32:96] = True
    segment = hd.seg.SegmentDescription(
        segment_number=1,
        segment_label="tumour",
        segmented_property_category=codes.SCT.MorphologicallyAbnormalStructure,
        segmented_property_type=codes.SCT.Neoplasm,
        algorithm_type="MANUAL",
        display_color=hd.color.CIELabColor(53.24, 80.09, 67.20),  # sRGB red
    )
    seg = hd.seg.Segmentation(
        [source],
        mask,
        "BINARY",
        [segment],
        hd.UID(),
        2,
        hd.UID(),
        1,
        "Other",
        "tool",
        "1",
        "1",
        tile_pixel_array=True,
        dimension_organization_type="TILED_FULL",
        omit_empty_frames=False,
    )
    seg.save_as(tmp_path / "seg.dcm")
    viewer = ViewerModel()
    viewer.open(str(level0), plugin="napari-medvl")
    monkeypatch.setattr("napari.current_viewer", lambda: viewer)
    (labels,) = viewer.open(str(tmp_path / "seg.dcm"), plugin="napari-medvl")
    assert labels._type_string == "labels"
    assert labels.data.sum() == mask.sum()
    assert tuple(labels.scale) == pytest.approx((0.5, 0.5))  # the slide's um per px
    assert labels.name == "seg: tumour"
    shown = labels.colormap.map(np.array([0, 1]))
    assert shown[0][3] == 0  # outside the segment stays transparent
    assert shown[1] == pytest.approx((1.0, 0.0, 0.0, 1.0), abs=0.02)  # its recommended colour


def test_a_demo_models_map_carries_its_notice_to_the_colour_bar(results):
    _, pm, _ = results
    (image,) = read_paths(str(pm))
    metadata = image[1]["metadata"]
    assert metadata["demo_notice"] == "demo model trained on synthetic data, not for diagnosis"
    assert metadata["medvl_kind"] == "heatmap" and metadata["heatmap"] is None  # not re-exportable
    assert metadata["value_range"] == pytest.approx((0.0, 1.0))
