"""Mammograms in a real viewer (Xvfb): side-by-side views and the TopK dock widget."""

from __future__ import annotations

import csv

import npe2
import numpy as np
import pytest
from napari.utils.notifications import notification_manager

from napari_medvl._event_turns import GLYPH_RANKS
from napari_medvl._export_widget import ExportWidget
from napari_medvl._layers import MAMMOGRAM_GAP_PX
from napari_medvl._mammo_layers import PENDING_SUFFIX, TOPK_PENDING_KIND
from napari_medvl._topk_widget import TopKWidget

pytestmark = pytest.mark.gui


@pytest.fixture(scope="session")
def wait_for_topk(wait_for_runner):
    """``wait_for_topk(qtbot, widget)`` waits until the job has ended and its layers are all
    added (one per event-loop turn)."""

    def _wait_for_topk(qtbot, widget):
        wait_for_runner(qtbot, widget.runner)
        qtbot.waitUntil(lambda: not widget.drawing, timeout=60_000)

    return _wait_for_topk


def _part(layer, part: str):
    """The rectangles of a TopK marks layer's ``part`` (rim, box or label), and their rows of
    its features."""
    rows = np.flatnonzero(layer.features["part"].to_numpy() == part)
    return [layer.data[row] for row in rows], layer.features.iloc[rows]


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
    wait_for_runner,
    wait_for_topk,
):
    viewer = make_napari_viewer()
    cc, mlo = _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    assert widget.cc_choice.value is cc and widget.mlo_choice.value is mlo
    widget.model.value = str(tiny_topk)
    widget.k.value = 5
    assert widget.run() is not None
    wait_for_topk(qtbot, widget)
    assert widget.runner.last_error is None, widget.runner.last_error
    result = widget.last_outcome.result

    shown = 0
    for view, offset in (("CC", 0.0), ("MLO", 320.0 + MAMMOGRAM_GAP_PX)):
        boxes, features = _part(viewer.layers[f"TopK L boxes {view}"], "box")
        engine_boxes = result.boxes[view]
        assert len(boxes) == len(engine_boxes)
        for rectangle, (x0, y0, x1, y1) in zip(boxes, engine_boxes, strict=True):
            # world (y, x) = source px (y, x) shifted right by the view's offset
            np.testing.assert_allclose(rectangle.min(axis=0), [y0, x0 + offset])
            np.testing.assert_allclose(rectangle.max(axis=0), [y1, x1 + offset])
        np.testing.assert_array_equal(features["rank"], result.ranks[view])
        shown += len(engine_boxes)
        importance = viewer.layers[f"TopK L importance {view}"]
        half = result.importance[:4] if view == "CC" else result.importance[4:]
        rows, cols = importance.data.shape  # half of the 8 x 8 grid, painted on the cell edges
        assert cols > rows >= 4  # a half of the grid: about twice as wide as tall
        np.testing.assert_allclose(np.unique(importance.data), np.unique(half), rtol=1e-6)
    assert shown == 5
    assert "cancer:" in widget.readouts.value
    assert (result.k, result.evaluated_k) == (5, 3)  # the tiny model's K is 3
    run = viewer.layers["TopK L boxes CC"].metadata["topk_run"]  # the engine's whole answer
    assert run.result is result and run.cc.path == mammo_case.cc_path and not run.k_is_evaluated
    assert "Top 5 patches shown" in widget.controls.status.value
    assert "it was evaluated at K = 3." in widget.controls.status.value

    exporter = ExportWidget(viewer)
    exporter.layer_choice.value = viewer.layers["TopK L boxes CC"]
    exporter.path.value = tmp_path / "topk.csv"
    assert exporter.run() is not None
    wait_for_runner(qtbot, exporter.runner)
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
    make_napari_viewer, qtbot, tmp_path, mammo_case, wait_for_topk
):
    viewer = make_napari_viewer()
    _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    widget.model.value = str(tmp_path / "no-such-topk")
    before = len(notification_manager.records)
    assert widget.run() is not None
    wait_for_topk(qtbot, widget)
    messages = [record.message for record in notification_manager.records[before:]]
    assert len(messages) == 1 and "no-such-topk" in messages[0]
    topk = [layer for layer in viewer.layers if layer.name.startswith("TopK")]
    assert all(layer.metadata["medvl_kind"] == TOPK_PENDING_KIND for layer in topk)  # none filled
    assert all(layer.opacity == 0.0 for layer in topk)


def test_k_box_maximum_follows_the_model_and_the_engine_refuses_more(
    make_napari_viewer, mammo_case, tiny_topk
):
    viewer = make_napari_viewer()
    _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    widget.model.value = "no-such-topk-model"  # candidates unknown: K is capped loosely
    assert widget.k.max == 256
    widget.k.value = 200
    widget.model.value = str(tiny_topk)  # an 8 x 8 grid: 64 candidates, evaluated at K = 3
    assert widget.k.max == 64 and widget.k.value == 3
    with pytest.raises(ValueError, match="outside of the allowed range"):
        widget.k.value = 65

    from medvl_engine.errors import ConfigError
    from medvl_engine.io.mammo import open_mammogram
    from napari_medvl._topk_job import TopKRequest, topk_job

    request = TopKRequest(
        open_mammogram(mammo_case.cc_path), open_mammogram(mammo_case.mlo_path), str(tiny_topk), 65
    )
    with pytest.raises(ConfigError, match="exceeds the 64 candidate patches"):
        for _ in topk_job(request, {}):
            pass


def test_k_starts_at_the_evaluated_k_and_the_dock_says_when_it_departs(
    make_napari_viewer, tiny_topk
):
    from qtpy.QtWidgets import QLabel

    viewer = make_napari_viewer()
    widget = TopKWidget(viewer)  # the demo model: evaluated at K = 4
    assert widget.k.value == 4 and widget.k_note.value == "evaluated at K = 4"
    widget.k.value = 6
    assert widget.k_note.value == "evaluated at K = 4; K = 6 departs from it"
    widget.model.value = str(tiny_topk)  # another model: K follows its evaluated K
    assert widget.k.value == 3 and widget.k_note.value == "evaluated at K = 3"
    widget.model.value = "no-such-topk-model"  # unknown: K stays, nothing is claimed
    assert widget.k.value == 3 and widget.k_note.value == ""
    labels = [label.text() for label in widget.native.findChildren(QLabel)]
    assert labels.count("model") == 1  # the model row is labelled once


def _tail_heavy_importance_layer():
    """The CC importance layer of a 4 x 4 map: two cells (0.9, 0.5), the rest 1e-13."""
    from napari_medvl._layer_frame import WorldFrame
    from napari_medvl._mammo_layers import readable_topk_layers

    class Breast:  # CC on the top half of a 64 px breast image, source px = breast px
        image = np.zeros((64, 64), np.float32)

        def to_source(self, view, points_xy):
            return np.asarray(points_xy, dtype=np.float64) - [0.0, 32.0 * (view == "MLO")]

    importance = np.full((4, 4), 1e-13, np.float32)  # the softmax's tail
    importance[0, 0], importance[1, 2] = 0.9, 0.5
    result = type("Result", (), {"importance": importance, "cell_bounds": None})()
    result.boxes = result.scores = result.ranks = {"CC": np.zeros((0, 4))}
    return readable_topk_layers(result, Breast(), {"CC": WorldFrame()})[0]


def test_importance_cells_under_the_floor_are_hidden_and_the_legend_says_so():
    from napari_medvl._colorbar import colorbar_caption
    from napari_medvl._topk_layers import IMPORTANCE_FLOOR

    data, kwargs, _ = _tail_heavy_importance_layer()
    assert np.isnan(data).mean() == pytest.approx(6 / 8)  # 6 of the CC half's 8 cells
    assert np.nanmin(data) == pytest.approx(0.5)
    assert kwargs["contrast_limits"][0] == pytest.approx(IMPORTANCE_FLOOR * 0.9)
    _, details = colorbar_caption(kwargs["metadata"])
    assert "scores 1e-13 .. 0.9; hidden below 0.009" in details


@pytest.mark.slow
def test_importance_cells_under_the_floor_are_transparent_on_screen(make_napari_viewer):
    from napari.layers import Layer

    viewer = make_napari_viewer(show=True)
    viewer.add_layer(Layer.create(*_tail_heavy_importance_layer()))
    viewer.reset_view()
    pixels = viewer.screenshot(canvas_only=True, flash=False)[..., :3].reshape(-1, 3)
    colours = {tuple(int(v) for v in colour) for colour in np.unique(pixels, axis=0)}
    assert (0, 0, 0) in colours and len(colours) == 3  # the canvas, and the two cells shown


def test_a_pair_of_two_patients_is_refused_before_any_model_loads(
    make_napari_viewer, tmp_path, mammo_case
):
    from medvl_engine.synthetic import make_mammogram_case

    other = make_mammogram_case(tmp_path, seed=8, laterality="L", size=(512, 320), exam_id="other")
    viewer = make_napari_viewer()
    npe2.PluginManager.instance().discover()
    cc = viewer.open(str(mammo_case.cc_path), plugin="napari-medvl")[0]
    mlo = viewer.open(str(other.mlo_path), plugin="napari-medvl")[0]
    widget = TopKWidget(viewer)
    widget.cc_choice.value, widget.mlo_choice.value = cc, mlo
    before = len(notification_manager.records)
    assert widget.run() is None
    message = notification_manager.records[before].message
    assert "are from different patients" in message
    assert widget.controls.status.value.startswith("Refused:")
    assert not widget.runner.running


def test_four_views_hang_with_chest_walls_facing_and_boxes_follow(
    make_napari_viewer, qtbot, tmp_path, mammo_case, tiny_topk, wait_for_runner, wait_for_topk
):
    from medvl_engine.synthetic import make_mammogram_case

    right = make_mammogram_case(
        tmp_path, seed=3, laterality="R", size=(512, 320), exam_id=mammo_case.cc_path.stem[:-5]
    )
    viewer = make_napari_viewer()
    npe2.PluginManager.instance().discover()
    for path in (mammo_case.cc_path, mammo_case.mlo_path, right.cc_path, right.mlo_path):
        viewer.open(str(path), plugin="napari-medvl")
    widget = TopKWidget(viewer)
    widget.model.value = str(tiny_topk)
    widget.k.value = 4
    widget.cc_choice.value, widget.mlo_choice.value = viewer.layers["L CC"], viewer.layers["L MLO"]
    widget.run()
    wait_for_topk(qtbot, widget)
    assert widget.runner.last_error is None, widget.runner.last_error

    assert widget.hang() is not None
    wait_for_runner(qtbot, widget._hang_runner)
    qtbot.waitUntil(lambda: not widget.drawing, timeout=60_000)
    gap = MAMMOGRAM_GAP_PX
    for name, (top, left, right_edge) in {
        "R CC": (0, -gap / 2 - 320, -gap / 2),
        "L CC": (0, gap / 2, gap / 2 + 320),
        "R MLO": (512 + gap, -gap / 2 - 320, -gap / 2),
        "L MLO": (512 + gap, gap / 2, gap / 2 + 320),
    }.items():
        layer = viewer.layers[name]
        h, w = layer.data.shape
        corners = np.array([layer.data_to_world(p) for p in ((-0.5, -0.5), (h - 0.5, w - 0.5))])
        (y0, x0), (y1, x1) = corners.min(axis=0), corners.max(axis=0)
        assert (y0, x0) == pytest.approx((top, left)), name
        assert (y1, x1) == pytest.approx((top + 512, right_edge)), name
        # the breast's chest wall (the side with more tissue) lies towards the midline x = 0
        pixels = layer.data
        first_col = layer.data_to_world((0, 0))[1]
        last_col = layer.data_to_world((0, pixels.shape[1] - 1))[1]
        chest_col = 0 if pixels[:, 0].mean() > pixels[:, -1].mean() else pixels.shape[1] - 1
        chest_x = first_col if chest_col == 0 else last_col
        other_x = last_col if chest_col == 0 else first_col
        assert abs(chest_x) < abs(other_x), name
    # the TopK boxes were redrawn through the hung frames: still on their source px
    result = widget.last_outcome.result
    for view in ("CC", "MLO"):
        layer = viewer.layers[f"L {view}"]
        boxes, _ = _part(viewer.layers[f"TopK L boxes {view}"], "box")
        for rectangle, (bx0, by0, bx1, by1) in zip(boxes, result.boxes[view], strict=True):
            expected = [layer.data_to_world((y, x)) for y, x in ((by0, bx0), (by1, bx1))]
            np.testing.assert_allclose(rectangle.min(axis=0), np.min(expected, axis=0) - [0.5, 0.5])
            np.testing.assert_allclose(rectangle.max(axis=0), np.max(expected, axis=0) - [0.5, 0.5])


def _assert_no_plate_covers_another(plates) -> None:
    lows = [np.min(plate, axis=0) for plate in plates]
    highs = [np.max(plate, axis=0) for plate in plates]
    for i in range(len(plates)):
        for j in range(i + 1, len(plates)):
            apart = np.any(highs[i] <= lows[j] + 1e-6) or np.any(highs[j] <= lows[i] + 1e-6)
            assert apart, f"label plates {i} and {j} overlap"


def test_label_plates_of_half_overlapping_boxes_never_cover_each_other():
    from napari_medvl._mammo_layers import place_plates

    # a 3 x 3 block of 64 px patches at 50 % overlap (stride 32), ranked in scan order
    boxes = np.array(
        [[x, y, x + 64, y + 64] for y in (0, 32, 64) for x in (0, 32, 64)], dtype=float
    )
    plates = place_plates(boxes, ranks=np.arange(1, 10))
    for plate, box in zip(plates, boxes, strict=True):
        assert box[0] <= plate[0] < plate[2] <= box[2]
        assert box[1] <= plate[1] < plate[3] <= box[3]
    corners = [np.array([[p[1], p[0]], [p[3], p[2]]]) for p in plates]  # (y, x) like napari
    _assert_no_plate_covers_another(corners)
    # rank 1 keeps the preferred top-left corner
    np.testing.assert_allclose(plates[0], [0, 0, 32, 64 * 0.22])


def test_rank_labels_sit_on_dark_plates_and_window_resets_to_voi(
    make_napari_viewer, qtbot, mammo_case, tiny_topk, wait_for_topk
):
    viewer = make_napari_viewer()
    cc, mlo = _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    widget.model.value = str(tiny_topk)
    widget.k.value = 6
    widget.run()
    wait_for_topk(qtbot, widget)
    assert widget.runner.last_error is None, widget.runner.last_error
    names = [layer.name for layer in viewer.layers]
    shown = 0
    for view in ("CC", "MLO"):
        marks = viewer.layers[f"TopK L boxes {view}"]
        assert names.index(marks.name) > names.index(f"TopK L importance {view}")
        rims, _ = _part(marks, "rim")
        boxes, box_features = _part(marks, "box")
        plates, plate_features = _part(marks, "label")
        count = len(boxes)
        # one layer drawn in this order: dark rims, the boxes over them, then plates and text
        assert list(marks.features["part"]) == ["rim"] * count + ["box"] * count + ["label"] * count
        assert len(rims) == len(plates) == count
        if count:
            edges = marks.edge_color * marks.opacity
            np.testing.assert_allclose(edges[:count, :3], 0.0)  # black rims, wider than boxes
            widths = np.asarray(marks.edge_width)
            assert np.all(widths[:count] > widths[count : 2 * count])
            np.testing.assert_allclose(edges[count : 2 * count, :3], [[0.0, 1.0, 0.0]] * count)
            faces = marks.face_color * marks.opacity
            np.testing.assert_allclose(faces[: 2 * count, 3], 0.0)  # rims and boxes unfilled
            np.testing.assert_allclose(faces[2 * count :, :3], 0.0)
            assert faces[2 * count :, 3].min() >= 0.55  # dark plates
        np.testing.assert_allclose(marks.text.color.constant[:3], 1.0)
        np.testing.assert_array_equal(plate_features["rank"], box_features["rank"])
        texts = list(marks.text.values)
        assert all(text.startswith("#") for text in texts[2 * count :])  # on the plates only
        assert all(text == "" for text in texts[: 2 * count])
        shown += count
        for plate, box in zip(plates, boxes, strict=True):  # a band inside its box
            assert np.all(plate.min(axis=0) >= box.min(axis=0) - 1e-6)
            assert np.all(plate.max(axis=0) <= box.max(axis=0) + 1e-6)
        _assert_no_plate_covers_another(plates)
    assert shown == 6
    importance = viewer.layers["TopK L importance CC"]
    assert importance.colormap.name == "medvl viridis"  # the map the exports use
    assert widget.colorbar.title.text().startswith("TopK importance")
    assert f"model: {tiny_topk}" in widget.colorbar.details.text()
    cc.contrast_limits = (0.3, 0.6)
    mlo.contrast_limits = (0.1, 0.2)
    widget.reset_window()
    assert tuple(cc.contrast_limits) == (0.0, 1.0) and tuple(mlo.contrast_limits) == (0.0, 1.0)
    assert "VOI" in widget.controls.status.value


def test_status_line_names_a_failure_and_the_demo_notice(
    make_napari_viewer, qtbot, tmp_path, mammo_case, wait_for_topk
):
    from medvl_engine.demo_models import DEMO_NOTICE

    viewer = make_napari_viewer()
    _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    assert widget.model.value == "topksiglip-demo"
    assert widget.controls.notice.value == DEMO_NOTICE
    assert not widget.controls.notice.native.isHidden()
    widget.model.value = str(tmp_path / "no-such-topk")
    assert widget.controls.notice.value == "" and widget.controls.notice.native.isHidden()
    widget.run()
    wait_for_topk(qtbot, widget)
    assert widget.controls.status.value.startswith("Failed:")
    assert "no-such-topk" in widget.controls.status.value


def test_a_second_dicom_window_is_applied_off_the_gui_thread(
    make_napari_viewer, qtbot, tmp_path, wait_for_runner
):
    import pydicom

    from medvl_engine.io.mammo import open_mammogram
    from medvl_engine.synthetic import make_mammogram_case

    case = make_mammogram_case(tmp_path, seed=3, laterality="L", size=(256, 160))
    for path in (case.cc_path, case.mlo_path):  # add a narrow second window
        dataset = pydicom.dcmread(path)
        center, width = float(dataset.WindowCenter), float(dataset.WindowWidth)
        dataset.WindowCenter = [center, center + width / 4]
        dataset.WindowWidth = [width, width / 4]
        dataset.save_as(path)
    viewer = make_napari_viewer()
    cc, mlo = _open_views(viewer, case)
    widget = TopKWidget(viewer)
    assert [label for label, _ in widget._voi_choices()] == cc.metadata["mammogram"].voi_choices
    assert len(widget.voi.choices) == 2
    widget.voi.value = 1
    wait_for_runner(qtbot, widget._voi_runner)
    for layer, path in ((cc, case.cc_path), (mlo, case.mlo_path)):
        expected = open_mammogram(path, voi_index=1).pixels
        np.testing.assert_array_equal(layer.data, expected)
        assert not np.array_equal(expected, open_mammogram(path).pixels)
        assert layer.metadata["mammogram"].voi == open_mammogram(path, voi_index=1).voi
    assert widget.controls.status.value.startswith("VOI applied to 2 view(s)")


RESULT_LAYERS = [
    *(f"TopK L importance {view}" for view in ("CC", "MLO")),
    *(f"TopK L boxes {view}" for view in ("CC", "MLO")),  # rims, boxes and labels: one layer
]


def _wait_for_waiting_layers(qtbot, viewer) -> list:
    """The TopK dock's result layers, added empty when it chose the pair; waits until all are
    there and their labels have shown every glyph of a rank label."""
    qtbot.waitUntil(lambda: len(viewer.layers) == 2 + len(RESULT_LAYERS), timeout=30_000)
    waiting = list(viewer.layers)[2:]
    labels = [layer for layer in waiting if " boxes " in layer.name]
    qtbot.waitUntil(
        lambda: all(layer.features["rank"][0] == GLYPH_RANKS[-1] for layer in labels),
        timeout=10_000,
    )
    return waiting


def test_result_layers_wait_empty_before_the_first_result_and_results_add_none(
    make_napari_viewer, qtbot, mammo_case, tiny_topk, wait_for_topk
):
    viewer = make_napari_viewer()
    cc, mlo = _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    widget.model.value = str(tiny_topk)
    waiting = _wait_for_waiting_layers(qtbot, viewer)
    assert [layer.name for layer in waiting] == [name + PENDING_SUFFIX for name in RESULT_LAYERS]
    for layer in waiting:  # invisible, and nothing to export
        assert layer.metadata["medvl_kind"] == TOPK_PENDING_KIND and layer.opacity == 0.0
    for view, image in (("CC", cc), ("MLO", mlo)):  # each placed on its view
        importance = viewer.layers[f"TopK L importance {view}{PENDING_SUFFIX}"]
        assert np.isnan(importance.data).all()
        np.testing.assert_allclose(importance.data_to_world((0, 0)), image.data_to_world((0, 0)))

    for k in (5, 3):  # a first result and a re-run fill the same layers
        widget.k.value = k
        widget.run()
        wait_for_topk(qtbot, widget)
        assert widget.runner.last_error is None, widget.runner.last_error
        assert list(viewer.layers) == [cc, mlo, *waiting]
        assert [layer.name for layer in waiting] == RESULT_LAYERS
        assert all(layer.opacity > 0.4 for layer in waiting)
        result = widget.last_outcome.result
        marks = [viewer.layers[f"TopK L boxes {view}"] for view in ("CC", "MLO")]
        assert sum(len(_part(layer, "box")[0]) for layer in marks) == k
        for layer, view in zip(marks, ("CC", "MLO"), strict=True):
            np.testing.assert_array_equal(_part(layer, "box")[1]["rank"], result.ranks[view])
            count = len(result.ranks[view])
            assert len(layer.data) == 3 * count  # a rim, a box and a plate each
            assert [int(text.split()[0][1:]) for text in layer.text.values[2 * count :]] == list(
                result.ranks[view]
            )
        importance = viewer.layers["TopK L importance CC"]
        assert not np.isnan(importance.data).any()
        np.testing.assert_allclose(np.unique(importance.data), np.unique(result.importance[:4]))


def _four_view_exam(viewer, mammo_case, folder) -> None:
    """The L pair of ``mammo_case`` and an R pair of the same exam, opened in that order."""
    from medvl_engine.synthetic import make_mammogram_case

    right = make_mammogram_case(
        folder, seed=3, laterality="R", size=(512, 320), exam_id=mammo_case.cc_path.stem[:-5]
    )
    npe2.PluginManager.instance().discover()
    for path in (mammo_case.cc_path, mammo_case.mlo_path, right.cc_path, right.mlo_path):
        viewer.open(str(path), plugin="napari-medvl")


def _both_breasts_waiting(qtbot, viewer) -> list:
    """The 8 result layers (L's, then R's) the dock adds empty for a four-view exam."""
    names = [name + PENDING_SUFFIX for side in "LR" for name in _result_layers(side)]
    qtbot.waitUntil(lambda: len(viewer.layers) == 4 + len(names), timeout=60_000)
    waiting = list(viewer.layers)[4:]
    assert [layer.name for layer in waiting] == names
    return waiting


def _on_its_view(viewer, layer) -> bool:
    """True when a waiting layer lies on its view: an importance map (one cell of one source
    px) maps source px as the view does; boxes and labels (one box of one source px) sit
    inside the view."""
    words = layer.metadata["result_name"].split()  # "TopK L boxes CC"
    image = viewer.layers[f"{words[1]} {words[-1]}"]
    if words[2] == "importance":
        return all(
            np.allclose(layer.data_to_world(p), image.data_to_world(p), atol=1e-6)
            for p in ((0, 0), (0, 1), (1, 1))
        )
    height, width = image.data.shape[:2]
    corners = [image.data_to_world(p) for p in ((-0.5, -0.5), (height - 0.5, width - 0.5))]
    low, high = np.min(corners, axis=0) - 1e-6, np.max(corners, axis=0) + 1e-6
    points = np.array([layer.data_to_world(v) for v in np.concatenate(layer.data)])
    return bool(((points >= low) & (points <= high)).all())


def _result_layers(side: str) -> list[str]:
    return [name.replace("TopK L ", f"TopK {side} ") for name in RESULT_LAYERS]


def _assert_shows(viewer, side: str, result) -> None:
    """The ``side`` breast's layers show ``result``: boxes and rank labels of each view, and
    the importance map's cells."""
    for view in ("CC", "MLO"):
        marks = viewer.layers[f"TopK {side} boxes {view}"]
        boxes, features = _part(marks, "box")
        np.testing.assert_array_equal(features["rank"], result.ranks[view])
        np.testing.assert_allclose(features["score"], result.scores[view])
        count = len(result.boxes[view])
        assert len(boxes) == count and len(marks.data) == 3 * count
        labels = marks.text.values[2 * count :]
        assert [int(text.split()[0][1:]) for text in labels] == list(result.ranks[view])
        layer = viewer.layers[f"{side} {view}"]
        for rectangle, (bx0, by0, bx1, by1) in zip(boxes, result.boxes[view], strict=True):
            corners = [layer.data_to_world(yx) for yx in ((by0, bx0), (by1, bx1))]
            np.testing.assert_allclose(rectangle.min(axis=0), np.min(corners, axis=0) - 0.5)
            np.testing.assert_allclose(rectangle.max(axis=0), np.max(corners, axis=0) - 0.5)
    importance = viewer.layers[f"TopK {side} importance CC"]
    assert importance.opacity > 0.4 and not np.isnan(importance.data).all()


def test_a_second_breasts_run_fills_the_layers_that_waited_for_it(
    make_napari_viewer, qtbot, tmp_path, mammo_case, tiny_topk, wait_for_topk
):
    """On a four-view exam the dock adds the other breast's result layers too (after the
    chosen pair's); its Run then fills them in place: the same layer objects, none added."""
    viewer = make_napari_viewer()
    _four_view_exam(viewer, mammo_case, tmp_path)
    widget = TopKWidget(viewer)
    widget.model.value = str(tiny_topk)
    widget.k.value = 4
    widget.cc_choice.value, widget.mlo_choice.value = viewer.layers["L CC"], viewer.layers["L MLO"]
    waiting = _both_breasts_waiting(qtbot, viewer)
    # once drawn (shaders built, glyphs rendered) they are hidden: napari skips them per frame
    qtbot.waitUntil(lambda: not any(layer.visible for layer in waiting), timeout=30_000)
    # "Hang views" moves the views; the layers waiting on them move with them
    corners = {side: viewer.layers[f"{side} CC"].data_to_world((0, 0)) for side in "LR"}
    widget.hang()
    qtbot.waitUntil(lambda: not widget._hang_runner.running, timeout=30_000)
    assert widget._hang_runner.last_error is None, widget._hang_runner.last_error
    assert any(
        not np.allclose(viewer.layers[f"{side} CC"].data_to_world((0, 0)), corners[side])
        for side in "LR"
    )
    # moved one per event-loop turn: every waiting layer lies on its view's source px
    qtbot.waitUntil(lambda: all(_on_its_view(viewer, layer) for layer in waiting), timeout=10_000)
    widget.run()
    wait_for_topk(qtbot, widget)
    assert widget.runner.last_error is None, widget.runner.last_error
    left = widget.outcomes["L"].result

    widget.cc_choice.value, widget.mlo_choice.value = viewer.layers["R CC"], viewer.layers["R MLO"]
    qtbot.wait(300)  # the dock looks for the pair's layers: all there, none added
    widget.run()
    wait_for_topk(qtbot, widget)
    assert widget.runner.last_error is None, widget.runner.last_error
    assert list(viewer.layers)[4:] == waiting  # the same objects, in the same order
    assert [layer.name for layer in waiting] == _result_layers("L") + _result_layers("R")
    assert all(layer.metadata["medvl_kind"] != TOPK_PENDING_KIND for layer in waiting)
    assert all(layer.visible for layer in waiting)
    right = widget.outcomes["R"].result
    assert widget.last_outcome.breast.laterality == "R"
    _assert_shows(viewer, "R", right)
    _assert_shows(viewer, "L", left)  # the first breast's result stays


def test_the_dock_loads_its_model_after_the_result_layers(
    make_napari_viewer, qtbot, mammo_case, tiny_topk
):
    """No model loads while the dock adds the pair's result layers; once they are there the
    model loads in the background, and a first Run uses it instead of loading its own."""
    viewer = make_napari_viewer()
    _open_views(viewer, mammo_case)
    widget = TopKWidget(viewer)
    widget.model.value = str(tiny_topk)
    loading_when_added: list[bool] = []
    viewer.layers.events.inserted.connect(
        lambda event: loading_when_added.append(bool(widget._loading or widget.models))
    )
    _wait_for_waiting_layers(qtbot, viewer)
    assert loading_when_added and not any(loading_when_added)
    qtbot.waitUntil(lambda: str(tiny_topk) in widget.models, timeout=60_000)
    preloaded = widget.models[str(tiny_topk)]
    assert not widget._loading and not widget.runner.running  # no job ran
    widget.run()
    qtbot.waitUntil(lambda: not widget.runner.running, timeout=60_000)
    assert widget.runner.last_error is None, widget.runner.last_error
    assert widget.models[str(tiny_topk)] is preloaded
