"""Slides in the viewer: no level read decodes on the GUI thread, and once the blocks are
decoded the canvas shows exactly the slide's pixels."""

from __future__ import annotations

import threading
import time

import dask.array as da
import numpy as np
import pytest

from napari_medvl._progressive_levels import ProgressiveLevel


class _GatedLevel:
    """A level whose reads record their thread and wait for ``gate`` (decoding held back)."""

    def __init__(self, level, threads, gate):
        self.level, self.threads, self.gate = level, threads, gate
        self.shape, self.dtype = level.shape, level.dtype

    def __getitem__(self, key):
        self.threads.append(threading.current_thread().name)
        self.gate.wait(20)
        return self.level[key]


def _open(viewer, path):
    import npe2

    npe2.PluginManager.instance().discover()
    return viewer.open(str(path), plugin="napari-medvl")[0]


def test_panning_a_slide_decodes_off_the_gui_thread_and_ends_sharp(
    make_napari_viewer, qtbot, small_slide, sync_slicing
):
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer = _open(viewer, small_slide.path)
    assert all(isinstance(level, ProgressiveLevel) for level in layer.data)
    store = layer.data[0].store
    qtbot.waitUntil(store.idle, timeout=20000)  # the coarsest level, asked for at open
    readers: list[str] = []
    gate = threading.Event()
    store.levels = [_GatedLevel(level, readers, gate) for level in store.levels]
    viewer.camera.zoom = 2.0  # level 0, a window at a time
    for step in range(6):
        viewer.camera.center = (300.0, 150.0 + 40.0 * step)
        qtbot.wait(30)
    assert layer.data_level == 0
    qtbot.wait(300)
    preview = viewer.screenshot(canvas_only=True, flash=False)  # decoding held back
    gate.set()
    qtbot.waitUntil(store.idle, timeout=20000)
    qtbot.wait(400)  # the refresh after the last block
    assert readers and "MainThread" not in readers
    shown = viewer.screenshot(canvas_only=True, flash=False)
    layer.data = [  # the same pixels in memory, in the same blocks (napari reads whole ones)
        da.from_array(np.asarray(level), chunks=progressive.chunks)
        for level, progressive in zip(layer.metadata["slide"].levels, layer.data, strict=True)
    ]
    qtbot.wait(300)
    exact = viewer.screenshot(canvas_only=True, flash=False)
    assert np.array_equal(shown, exact)
    assert not np.array_equal(preview, exact)  # the preview was the coarser level


def test_with_napari_async_slicing_the_slide_keeps_its_dask_levels(
    make_napari_viewer, small_slide, async_slicing
):
    viewer = make_napari_viewer()
    layer = _open(viewer, small_slide.path)
    assert all(type(level).__module__.startswith("dask") for level in layer.data)


class _Store:
    """A block store whose worker is busy until ``busy`` is cleared."""

    def __init__(self):
        self.busy = True

    def idle(self):
        return not self.busy

    def take_error(self):
        return None


class _Layer:
    def __init__(self):
        self.refreshes = 0

    def refresh(self):
        self.refreshes += 1


def test_blocks_refresh_the_layer_once_the_view_is_decoded(qtbot, monkeypatch):
    from napari_medvl._slide_display import MAX_REFRESH_WAIT_MS, SlideRefresher

    refresher = SlideRefresher(slide=object())
    refresher.store = store = _Store()
    layer = _Layer()
    monkeypatch.setattr(refresher, "layers", lambda: [layer])
    for _ in range(5):  # blocks arrive while others are still being decoded
        refresher.block_ready()
        qtbot.wait(40)
    assert layer.refreshes == 0  # no redraw per block
    store.busy = False
    refresher.block_ready()  # the last block of the view
    qtbot.waitUntil(lambda: layer.refreshes == 1, timeout=MAX_REFRESH_WAIT_MS // 2)
    qtbot.wait(MAX_REFRESH_WAIT_MS + 100)
    assert layer.refreshes == 1  # one refresh for all of them

    store.busy = True  # a long pan: decoding never stops, yet the view is refreshed
    started = time.perf_counter()
    refresher.block_ready()
    qtbot.waitUntil(lambda: layer.refreshes == 2, timeout=60_000)
    waited_ms = (time.perf_counter() - started) * 1e3
    assert waited_ms >= MAX_REFRESH_WAIT_MS * 0.9  # not before the longest wait


def _saved(path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) if path.exists() else {}


def test_opening_a_slide_keeps_naparis_synchronous_slicing_and_its_settings(
    fresh_napari_settings, make_napari_viewer, qtbot, small_slide
):
    make, path, shown = fresh_napari_settings
    settings = make()
    viewer = make_napari_viewer()
    before = path.read_bytes() if path.exists() else None
    layer = _open(viewer, small_slide.path)
    assert not settings.experimental.async_
    assert viewer._layer_slicer._force_sync  # napari's default, synchronous slicing
    assert all(isinstance(level, ProgressiveLevel) for level in layer.data)
    assert shown == []  # nothing to say: nothing was changed
    assert (path.read_bytes() if path.exists() else None) == before
    qtbot.waitUntil(layer.data[0].store.idle, timeout=20000)  # no decoding left at teardown


@pytest.mark.parametrize("chosen_in", ["napari env", "settings file", "preferences"])
def test_a_user_who_chose_async_slicing_gets_the_dask_levels_napari_slices(
    fresh_napari_settings, make_napari_viewer, qtbot, small_slide, monkeypatch, chosen_in
):
    make, path, shown = fresh_napari_settings
    if chosen_in == "napari env":
        monkeypatch.setenv("NAPARI_ASYNC", "1")
    settings = make("experimental:\n  async_: true\n" if chosen_in == "settings file" else None)
    viewer = make_napari_viewer()
    if chosen_in == "preferences":  # a slide opened before the switch keeps its levels
        earlier = _open(viewer, small_slide.path)
        assert all(isinstance(level, ProgressiveLevel) for level in earlier.data)
        qtbot.waitUntil(earlier.data[0].store.idle, timeout=20000)
        settings.experimental.async_ = True
    layer = _open(viewer, small_slide.path)
    assert settings.experimental.async_
    assert not viewer._layer_slicer._force_sync
    assert all(type(level).__module__.startswith("dask") for level in layer.data)
    assert shown == []
    if chosen_in == "preferences":  # napari saves the user's own choice as usual
        assert _saved(path)["experimental"]["async_"] is True
