"""New top-patch rectangles draw without recompiling the shapes layer's mesh programs."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np

from napari_medvl._napari_compat import keep_mesh_shaders
from napari_medvl._widget_common import add_layer


def _rectangles(offset: float) -> list[np.ndarray]:
    return [
        np.array([[y, x], [y, x + 40.0], [y + 40.0, x + 40.0], [y + 40.0, x]])
        for y, x in ((10.0 + offset, 20.0), (90.0, 60.0 + offset), (30.0 + offset, 150.0))
    ]


def _top_patch_layer() -> tuple:
    kwargs = {
        "shape_type": "rectangle",
        "edge_color": "magenta",
        "face_color": "transparent",
        "edge_width": 4.0,
        "features": {"rank": [1, 2, 3]},
        "text": {"string": "#{rank}", "color": "white", "anchor": "upper_left", "size": 11},
    }
    return _rectangles(0.0), kwargs, "shapes"


def test_replaced_rectangles_draw_the_same_without_rebuilding_the_mesh_programs(
    make_napari_viewer, qtbot, monkeypatch
):
    from vispy.visuals.shaders.program import ModularProgram

    built: list[int] = []
    vispy_build = ModularProgram._build

    def counting_build(self):
        built.append(id(self))
        return vispy_build(self)

    monkeypatch.setattr(ModularProgram, "_build", counting_build)
    shots, rebuilds = {}, {}
    for keep in (False, True):
        viewer = make_napari_viewer(show=True)
        viewer.window.resize(800, 600)
        data = _top_patch_layer()
        if keep:
            layer = add_layer(viewer, data)
        else:
            from napari.layers import Layer

            layer = viewer.add_layer(Layer.create(*data))
        viewer.camera.center, viewer.camera.zoom = (90.0, 110.0), 2.0
        qtbot.wait(100)
        viewer.screenshot(canvas_only=True, flash=False)  # the first draw compiles them
        node = viewer.window._qt_viewer.canvas.layer_to_visual[layer].node
        meshes = {
            id(program)
            for mesh in (node.shape_faces, node.shape_highlights)
            for program in mesh.shared_program._programs.values()
        }
        built.clear()
        for offset in (5.0, 12.0, 20.0):
            layer.data = [(corners, "rectangle") for corners in _rectangles(offset)]
            shots[keep] = viewer.screenshot(canvas_only=True, flash=False)
        rebuilds[keep] = sum(program in meshes for program in built)
        np.testing.assert_allclose(layer.data[0][0], [30.0, 20.0])
    assert rebuilds[False] >= 3  # vispy recompiles on each new set of rectangles
    assert rebuilds[True] == 0
    red, green, blue = (shots[True][..., channel].astype(int) for channel in range(3))
    magenta = (red > 120) & (blue > 120) & (green < 60)  # magenta at 0.7 opacity on black
    assert magenta.sum() > 200  # the rectangles were drawn
    np.testing.assert_array_equal(shots[True], shots[False])


def test_a_dock_keeps_the_shaders_through_napari_s_public_only_proxies(make_napari_viewer):
    from napari.utils._proxies import PublicOnlyProxy

    viewer = make_napari_viewer()
    proxy = PublicOnlyProxy(viewer)  # what napari hands a dock widget
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the proxy warns of any private attribute read
        layer = add_layer(proxy, _top_patch_layer())
    node = viewer.window._qt_viewer.canvas.layer_to_visual[viewer.layers[0]].node
    assert getattr(node.shape_faces._build_color_transform, "keeps_rgba_function", False)
    assert keep_mesh_shaders(proxy, layer) is True
    assert viewer.layers[0]._update_draw.skips_hidden  # the layer itself, not its proxy


def test_keeping_shaders_is_a_no_op_where_napari_has_no_shapes_visual():
    viewer = SimpleNamespace(window=SimpleNamespace())
    assert keep_mesh_shaders(viewer, object()) is False
