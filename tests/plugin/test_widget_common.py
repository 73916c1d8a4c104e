"""Shared dock controls: long status lines wrap inside the dock instead of widening it."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui

LONG_STATUS = (
    "Failed: the CC view mg3_L_CC.dcm and the MLO view other_L_MLO.dcm are from different "
    "patients (PatientID 'A-0001' vs 'B-0002'); choose two views of one breast of one study. "
) * 2


@pytest.mark.parametrize("dock", ["topk", "classify"])
def test_a_long_status_line_wraps_and_keeps_the_dock_width(make_napari_viewer, qtbot, dock):
    from napari_medvl._classify_widget import ClassifyWidget
    from napari_medvl._topk_widget import TopKWidget

    viewer = make_napari_viewer(show=True)
    widget = (TopKWidget if dock == "topk" else ClassifyWidget)(viewer)
    dock_widget = viewer.window.add_dock_widget(widget, name=dock)
    qtbot.wait(50)
    width_before = dock_widget.width()
    canvas_before = viewer.window._qt_viewer.canvas.native.width()

    widget.controls.status.value = LONG_STATUS
    widget.controls.set_notice("demo model trained on synthetic data, not for diagnosis " * 3)
    status = widget.controls.status.native
    lines = status.fontMetrics().lineSpacing()
    # the layout settles within a few event-loop turns (longer on a loaded machine)
    qtbot.waitUntil(lambda: status.height() >= 2 * lines, timeout=3000)
    qtbot.wait(50)

    assert status.wordWrap()
    assert dock_widget.width() <= width_before + 2
    assert viewer.window._qt_viewer.canvas.native.width() >= canvas_before - 2
    # the whole text is shown on several lines, none wider than the dock
    assert status.height() >= 2 * status.fontMetrics().lineSpacing()
    assert status.width() <= dock_widget.width()


def test_a_result_updates_each_layer_with_one_refresh(make_napari_viewer):
    """New data, scale, contrast limits and colour map of an image layer, and new rectangles
    with their feature table, each reach napari as one refresh (one slice, one thumbnail)."""
    import numpy as np
    from napari.layers import Shapes

    from napari_medvl._widget_common import upsert_layer

    viewer = make_napari_viewer()
    image = viewer.add_image(np.zeros((4, 6), np.float32), name="map", contrast_limits=(0, 1))
    boxes = viewer.add_shapes(
        [np.array([[0, 0], [0, 2], [2, 2], [2, 0]], float)],
        shape_type="rectangle",
        name="boxes",
        features={"rank": [1]},
    )
    refreshes = {"map": 0, "boxes": 0}
    for layer in (image, boxes):
        layer.events.set_data.connect(
            lambda event, name=layer.name: refreshes.__setitem__(name, refreshes[name] + 1)
        )
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    kwargs = {"name": "map", "scale": (2.0, 2.0), "contrast_limits": (0.0, 23.0)}
    kwargs["colormap"] = "magma"
    assert upsert_layer(viewer, (values, kwargs, "image")) is image
    rectangles = [np.array([[y, 1], [y, 3], [y + 1, 3], [y + 1, 1]], float) for y in (0, 2, 4)]
    assert (
        upsert_layer(
            viewer, (rectangles, {"name": "boxes", "features": {"rank": [1, 2, 3]}}, "shapes")
        )
        is boxes
    )

    assert refreshes == {"map": 1, "boxes": 1}
    np.testing.assert_array_equal(image.data, values)
    assert tuple(image.scale) == (2.0, 2.0) and image.colormap.name == "magma"
    assert isinstance(boxes, Shapes) and boxes.shape_type == ["rectangle"] * 3
    assert list(boxes.features["rank"]) == [1, 2, 3]
    # what is drawn is the new data: the slice and the thumbnail follow it
    np.testing.assert_array_equal(np.asarray(image._slice.image.view), values)


def test_the_progress_bar_shows_only_once_a_job_reports_a_total(qtbot):
    """A job that has not said how much work it has shows a status line, not an animated
    bar (an indeterminate bar repaints the window 60 times a second)."""
    from napari_medvl._progress import Progress
    from napari_medvl._widget_common import JobControls

    controls = JobControls()
    controls.native.show()
    controls.set_running(True)
    assert not controls.progress.visible and controls.status.value == "Working..."
    controls.show_progress(Progress("loading model"))
    assert not controls.progress.visible and controls.status.value == "loading model..."
    controls.show_progress(Progress("features", 3, 12))
    assert controls.progress.visible
    assert (controls.progress.value, controls.progress.max) == (3, 12)
    assert controls.status.value.startswith("features: 3 / 12")
    controls.set_running(False)
    assert not controls.progress.visible
