"""Partial maps wait while the view moves: shown once it is still, or after the longest wait."""

from __future__ import annotations

import pytest
from qtpy.QtWidgets import QWidget

from napari_medvl._partial_pacing import PartialMapPacer


class _Clock:
    def __init__(self) -> None:
        self.now_ms = 1000.0

    def __call__(self) -> float:
        return self.now_ms


@pytest.fixture
def paced(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    parent = QWidget()
    qtbot.addWidget(parent)
    clock, shown = _Clock(), []
    pacer = PartialMapPacer(
        viewer, parent, shown.append, still_ms=200, max_wait_ms=1000, clock=clock
    )
    return viewer, pacer, clock, shown


def test_a_map_for_a_still_view_shows_at_once(paced):
    _viewer, pacer, _clock, shown = paced
    pacer.offer("first")
    assert shown == ["first"] and pacer.waiting is None


def test_a_map_waits_while_the_view_pans_and_the_newest_shows_once_it_is_still(paced, qtbot):
    viewer, pacer, clock, shown = paced
    viewer.camera.center = (0.0, 10.0, 10.0)
    pacer.offer("first")
    clock.now_ms += 150
    pacer.offer("second")
    qtbot.wait(250)  # the pacer looked again, and the view has moved 150 ms ago
    assert shown == [] and pacer.waiting == "second"
    clock.now_ms += 60
    qtbot.waitUntil(lambda: shown == ["second"], timeout=2000)
    assert pacer.waiting is None


def test_zoom_and_a_new_slice_are_moves_too(paced, qtbot):
    viewer, pacer, clock, shown = paced
    viewer.camera.zoom = viewer.camera.zoom * 1.5
    pacer.offer("after zoom")
    assert shown == []
    clock.now_ms += 250
    qtbot.waitUntil(lambda: shown == ["after zoom"], timeout=2000)
    viewer.dims.ndisplay = 2
    viewer.dims.events.current_step(value=(0, 0))
    pacer.offer("after a step")
    assert shown == ["after zoom"]


def test_a_user_panning_without_pause_still_sees_the_map_after_the_longest_wait(paced, qtbot):
    viewer, pacer, clock, shown = paced
    for step in range(9):  # 900 ms of panning
        viewer.camera.center = (0.0, 10.0 * step, 10.0)
        pacer.offer(f"map {step}")
        clock.now_ms += 100
        qtbot.wait(20)
    assert shown == []
    viewer.camera.center = (0.0, 100.0, 10.0)
    clock.now_ms += 100  # 1000 ms since the first waiting map arrived
    qtbot.waitUntil(lambda: shown == ["map 8"], timeout=2000)


def test_a_dropped_map_is_never_shown(paced, qtbot):
    viewer, pacer, clock, shown = paced
    viewer.camera.center = (0.0, 5.0, 5.0)
    pacer.offer("stale")
    pacer.drop()
    clock.now_ms += 5000
    qtbot.wait(300)
    assert shown == [] and pacer.waiting is None
