"""Docks opened in napari's default window scroll inside it: they never make the window (and
so the canvas) change size, however many lines their status holds."""

from __future__ import annotations

import pytest
from qtpy.QtWidgets import QScrollArea

pytestmark = pytest.mark.gui

DEFAULT_WINDOW = (1066, 651)  # napari's first window on a 1600 x 1000 screen
TALL_DOCKS = ("Text prompt heatmap", "Mammogram TopK", "Slide classification", "Segment by prompts")


def _canvas_size(viewer):
    return tuple(viewer.window._qt_viewer.canvas.size)


@pytest.mark.parametrize("name", TALL_DOCKS)
def test_a_tall_dock_scrolls_and_its_status_lines_leave_the_window_and_canvas_alone(
    make_napari_viewer, qtbot, name
):
    viewer = make_napari_viewer(show=True)
    window = viewer.window._qt_window
    window.resize(*DEFAULT_WINDOW)
    qtbot.wait(50)
    _, widget = viewer.window.add_plugin_dock_widget("napari-medvl", name)
    qtbot.wait(100)
    assert isinstance(widget.native, QScrollArea)  # what napari docked: the scroll area
    assert widget.native.widget() is widget.body
    assert (window.width(), window.height()) == DEFAULT_WINDOW
    canvas = _canvas_size(viewer)
    status = widget.controls.status
    for text in ("Working...", "", "A status long enough to wrap. " * 12, "Stopped."):
        status.value = text
        qtbot.wait(50)
        assert (window.width(), window.height()) == DEFAULT_WINDOW, text
        assert _canvas_size(viewer) == canvas, text
    status.value = "\n".join(f"line {n} of a status taller than the window" for n in range(60))
    scroll_bar = widget.native.verticalScrollBar()
    qtbot.waitUntil(lambda: scroll_bar.maximum() > 0, timeout=2000)  # scrolls to show it all
    assert (window.width(), window.height()) == DEFAULT_WINDOW
    assert _canvas_size(viewer) == canvas
