"""Mammograms in a real viewer (Xvfb): side-by-side views and the TopK dock widget."""

from __future__ import annotations

import csv

import npe2
import numpy as np
import pytest
from napari.utils.notifications import notification_manager

import _plugin_helpers as helpers
from napari_medvl._export_widget import ExportWidget
from napari_medvl._layers import MAMMOGRAM_GAP_PX
from napari_medvl._topk_widget import TopKWidget

pytestmark = pytest.mark.gui
mammo_case = helpers.mammo_case  # fixture
tiny_topk = helpers.tiny_topk  # fixture


def _open_views(viewer, case):
    npe2.PluginManager.instance().discover()
    cc = viewer.open(str(case.cc_path), plugin="napari-medvl")[0]
    mlo = viewer.open(str(case.mlo_path), plugin="napari-medvl")[0]
    return cc, mlo


def test_views_opened_one_after_the_other_sit_side_by_side(
    make_napari_viewer,
    mammo_case,
):
    viewer = make_napari_viewer()
    cc, mlo = _open_views(viewer, mammo_case)
    assert (cc.name, mlo.name) == ("L CC", "L MLO")
    assert cc.data.shape == (512, 320)
    assert mlo.translate[1] - cc.translate[1] == pytest.approx(320 + MAMMOGRAM_GAP_PX)
    assert tuple(mlo.contrast_limits) == (0.0, 1.0)


def test_topk_widget_draws_engine_boxes_on_their_source_views(
    make_napari_viewer,
    qtbot,
    tmp_path,
    mammo_case,
    tiny_topk,
):
    viewer = make_napari_viewer()
    cc, mlo = _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    assert widget.cc_choice.value is cc and widget.mlo_choice.value is mlo
    widget.model.value = str(tiny_topk)
    widget.k.value = 5
    assert widget.run() is not None
    helpers.wait_for_runner(qtbot, widget.runner)
    assert widget.runner.last_error is None, widget.runner.last_error
    result = widget.last_outcome.result

    shown = 0
    for view, offset in (("CC", 0.0), ("MLO", 320.0 + MAMMOGRAM_GAP_PX)):
        boxes_layer = viewer.layers[f"TopK L boxes {view}"]
        engine_boxes = result.boxes[view]
        assert len(boxes_layer.data) == len(engine_boxes)
        for rectangle, (x0, y0, x1, y1) in zip(boxes_layer.data, engine_boxes, strict=True):
            # world (y, x) = source px (y, x) shifted right by the view's offset
            np.testing.assert_allclose(rectangle.min(axis=0), [y0, x0 + offset])
            np.testing.assert_allclose(rectangle.max(axis=0), [y1, x1 + offset])
        np.testing.assert_array_equal(boxes_layer.features["rank"], result.ranks[view])
        shown += len(engine_boxes)
        importance = viewer.layers[f"TopK L importance {view}"]
        half = result.importance[:4] if view == "CC" else result.importance[4:]
        rows, cols = importance.data.shape  # half of the 8 x 8 grid, painted on the cell edges
        assert cols > rows >= 4  # a half of the grid: about twice as wide as tall
        np.testing.assert_allclose(np.unique(importance.data), np.unique(half), rtol=1e-6)
    assert shown == 5
    assert "cancer:" in widget.readouts.value

    exporter = ExportWidget(viewer)
    exporter.layer_choice.value = viewer.layers["TopK L boxes CC"]
    exporter.path.value = tmp_path / "topk.csv"
    assert exporter.run() is not None
    helpers.wait_for_runner(qtbot, exporter.runner)
    with open(tmp_path / "topk.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(int(row["rank"]) for row in rows) == [1, 2, 3, 4, 5]
    assert {row["view"] for row in rows} <= {"CC", "MLO"}


def test_topk_without_two_views_says_what_to_do(make_napari_viewer):
    viewer = make_napari_viewer()
    widget = TopKWidget(viewer)
    before = len(notification_manager.records)
    assert widget.run() is None
    assert "CC and an MLO" in notification_manager.records[before].message


def test_topk_with_a_missing_model_names_it_in_one_sentence(
    make_napari_viewer, qtbot, tmp_path, mammo_case
):
    viewer = make_napari_viewer()
    _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    widget.model.value = str(tmp_path / "no-such-topk")
    before = len(notification_manager.records)
    assert widget.run() is not None
    helpers.wait_for_runner(qtbot, widget.runner)
    messages = [record.message for record in notification_manager.records[before:]]
    assert len(messages) == 1 and "no-such-topk" in messages[0]
    assert not any(layer.name.startswith("TopK") for layer in viewer.layers)


def test_topk_with_more_patches_than_candidates_says_so(
    make_napari_viewer, qtbot, mammo_case, tiny_topk
):
    viewer = make_napari_viewer()
    _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    widget.model.value = str(tiny_topk)
    widget.k.value = 65  # the tiny model has an 8 x 8 grid
    before = len(notification_manager.records)
    assert widget.run() is not None
    helpers.wait_for_runner(qtbot, widget.runner)
    assert "exceeds the 64 candidate patches" in notification_manager.records[before].message
