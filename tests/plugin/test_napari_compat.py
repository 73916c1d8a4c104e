"""The napari/vispy patches apply only on the versions they were written for."""

from __future__ import annotations

import logging

import pytest
from superqt.utils import create_worker

from napari_medvl import _napari_compat
from napari_medvl._job_status import list_running_job
from napari_medvl._napari_compat import (
    WRITTEN_FOR,
    keep_mesh_shaders,
    patch_applies,
    prerender_glyphs,
    skip_draw_updates_while_hidden,
)
from napari_medvl._widget_common import add_layer, upsert_layer

RECTANGLES = (
    [[[10.0, 10.0], [10.0, 50.0], [50.0, 50.0], [50.0, 10.0]]],
    {"shape_type": "rectangle", "face_color": "transparent"},
    "shapes",
)


def _one_step_job():
    yield 1


@pytest.fixture
def fresh_announcements(monkeypatch):
    monkeypatch.setattr(_napari_compat, "_announced", set())


def test_the_installed_napari_and_vispy_are_the_ones_the_patches_were_written_for():
    assert all(patch_applies(patch) for patch in WRITTEN_FOR)


@pytest.mark.parametrize("package, version", [("napari", "0.99.0"), ("vispy", "not a version")])
def test_an_unknown_version_leaves_napari_unpatched_and_says_so_once(
    make_napari_viewer, qtbot, monkeypatch, caplog, fresh_announcements, package, version
):
    import importlib

    monkeypatch.setattr(importlib.import_module(package), "__version__", version)
    viewer = make_napari_viewer(show=True)
    font_info = viewer.window._qt_viewer.canvas.font_info
    font_info = font_info() if callable(font_info) else font_info
    font = font_info.font_manager.get_font(font_info.face, False, False)
    label_glyphs = set("#-.0123456789") - set(font._glyphs)  # drawn by no layer here
    reached: list[str] = []
    for name in ("_canvas_font", "_shape_meshes"):
        private = getattr(_napari_compat, name)
        monkeypatch.setattr(
            _napari_compat, name, lambda *args, n=name, f=private: reached.append(n) or f(*args)
        )
    with caplog.at_level(logging.WARNING, logger=_napari_compat.__name__):
        stored = prerender_glyphs(viewer.window._qt_window, viewer)
        layer = add_layer(viewer, RECTANGLES)
        assert keep_mesh_shaders(viewer, layer) is False
        prerender_glyphs(viewer.window._qt_window, viewer)
        upsert_layer(viewer, (RECTANGLES[0], {**RECTANGLES[1], "name": layer.name}, "shapes"))
        unstarted = create_worker(_one_step_job, _start_thread=False)
        listed = list_running_job(unstarted, "one step")
    assert listed is (package != "napari")  # a job is listed weakly only where written for
    assert viewer.window._task_status_manager.get_status() == (
        [] if package == "napari" else ["napari-medvl: one step waiting"]
    )
    assert stored.is_set()  # nothing to wait for: napari makes glyphs at first draw
    qtbot.wait(200)  # a prerender would have stored its glyphs by now
    assert label_glyphs and not label_glyphs & set(font._glyphs)
    assert reached == []  # napari's private state was not even looked at
    node = viewer.window._qt_viewer.canvas.layer_to_visual[layer].node
    for mesh in (node.shape_faces, node.shape_highlights):
        assert not getattr(mesh._build_color_transform, "keeps_rgba_function", False)
    skips_hidden = getattr(layer._update_draw, "skips_hidden", False)
    assert skips_hidden is (package != "napari")  # that patch names napari alone
    refusals = [record.getMessage() for record in caplog.records]
    # once per patch written for that package, however often it is asked
    assert len(refusals) == sum(package in packages for packages in WRITTEN_FOR.values())
    assert all("leaves napari unpatched" in message for message in refusals)
    assert all(f"{package} {version}" in message for message in refusals)


def test_the_same_viewer_is_patched_on_the_versions_written_for(make_napari_viewer):
    viewer = make_napari_viewer(show=True)
    layer = add_layer(viewer, RECTANGLES)
    node = viewer.window._qt_viewer.canvas.layer_to_visual[layer].node
    assert getattr(node.shape_faces._build_color_transform, "keeps_rgba_function", False)


def test_a_hidden_layer_skips_the_draw_update_and_is_updated_by_the_draw_after_it_is_shown(
    make_napari_viewer, qtbot
):
    viewer = make_napari_viewer(show=True)
    ours = add_layer(viewer, RECTANGLES)  # what the docks add
    bare = viewer.add_shapes(RECTANGLES[0], shape_type="rectangle", name="bare")
    assert ours._update_draw.skips_hidden  # add_layer patched it
    assert skip_draw_updates_while_hidden(ours) is True  # again: nothing more to do
    camera = viewer.camera
    ours.visible = bare.visible = False
    qtbot.wait(200)
    before = ours.scale_factor
    camera.zoom *= 4  # frames drawn while both are hidden
    qtbot.waitUntil(lambda: bare.scale_factor == pytest.approx(1 / camera.zoom), timeout=5000)
    qtbot.wait(200)
    assert ours.scale_factor == before  # napari updated the bare hidden layer, not ours
    ours.visible = True
    qtbot.waitUntil(lambda: ours.scale_factor == pytest.approx(1 / camera.zoom), timeout=5000)


def test_a_layer_filled_in_place_updates_the_viewers_dims_once_and_to_its_new_extent(
    make_napari_viewer, monkeypatch
):
    import numpy as np

    viewer = make_napari_viewer()
    viewer.add_image(np.zeros((100, 100), dtype=np.float32))
    layer = add_layer(viewer, (RECTANGLES[0], {**RECTANGLES[1], "name": "boxes"}, "shapes"))
    updates: list[int] = []
    handler = type(viewer)._on_layers_change
    monkeypatch.setattr(
        type(viewer), "_on_layers_change", lambda self: updates.append(1) or handler(self)
    )
    layer.data = [(np.array([[10.0, 10.0], [10.0, 60.0], [60.0, 60.0], [60.0, 10.0]]), "rectangle")]
    assert len(updates) == 2  # napari itself: before and after the new rectangles
    updates.clear()
    far = [[[20.0, 20.0], [20.0, 400.0], [300.0, 400.0], [300.0, 20.0]]]
    assert upsert_layer(viewer, (far, {**RECTANGLES[1], "name": "boxes"}, "shapes")) is layer
    assert updates == [1]
    y_range, x_range = viewer.dims.range
    assert y_range.stop >= 300.0 and x_range.stop >= 400.0  # the viewer can reach the new box


def test_a_shapes_layer_draws_its_highlight_only_while_it_has_one(make_napari_viewer, qtbot):
    import numpy as np

    viewer = make_napari_viewer(show=True)
    layer = add_layer(viewer, RECTANGLES)
    node = viewer.window._qt_viewer.canvas.layer_to_visual[layer].node
    highlights = (node.shape_highlights, node.highlight_vertices, node.highlight_lines)
    assert not any(visual.visible for visual in highlights)  # nothing selected: not drawn
    unselected = viewer.screenshot(canvas_only=True, flash=False)
    layer.mode = "select"
    layer.selected_data = {0}
    assert all(visual.visible for visual in highlights)  # outline, box and its corners
    selected = viewer.screenshot(canvas_only=True, flash=False)
    assert np.abs(selected.astype(int) - unselected.astype(int)).sum() > 0  # drawn on screen
    layer.selected_data = set()
    assert not any(visual.visible for visual in highlights)


@pytest.mark.parametrize("image_shape, resliced", [((100, 100), False), ((5, 100, 100), True)])
def test_a_fill_that_moves_the_dims_range_reslices_other_layers_only_with_a_slider(
    make_napari_viewer, monkeypatch, image_shape, resliced
):
    import numpy as np
    from napari.layers import Image

    viewer = make_napari_viewer()
    viewer.add_image(np.zeros(image_shape, dtype=np.float32), name="view")
    ndim = len(image_shape)
    square = np.array([[10.0, 10.0], [10.0, 50.0], [50.0, 50.0], [50.0, 10.0]])
    lead = np.zeros((4, ndim - 2))
    boxes = {**RECTANGLES[1], "name": "boxes"}
    add_layer(viewer, ([np.hstack([lead, square])], boxes, "shapes"))
    sliced: list[str] = []
    slice_dims = Image._slice_dims
    monkeypatch.setattr(
        Image,
        "_slice_dims",
        lambda self, *a, **k: sliced.append(self.name) or slice_dims(self, *a, **k),
    )
    on_edge = np.array([[-0.5, -0.5], [-0.5, 20.0], [20.0, 20.0], [20.0, -0.5]])
    upsert_layer(viewer, ([np.hstack([lead, on_edge])], boxes, "shapes"))
    assert viewer.dims.range[-1].start == -0.5  # the dims follow the box to the image's edge
    assert viewer.dims.range[-2].start == -0.5
    assert ("view" in sliced) is resliced  # a 2D view's slice does not depend on the point
