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
    qtbot.wait(50)

    status = widget.controls.status.native
    assert status.wordWrap()
    assert dock_widget.width() <= width_before + 2
    assert viewer.window._qt_viewer.canvas.native.width() >= canvas_before - 2
    # the whole text is shown on several lines, none wider than the dock
    assert status.height() >= 2 * status.fontMetrics().lineSpacing()
    assert status.width() <= dock_widget.width()
