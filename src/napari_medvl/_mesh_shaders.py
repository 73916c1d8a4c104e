"""New rectangles in a shapes layer without recompiling its shaders.

vispy's ``MeshVisual`` builds a new colour-transform shader function every time its data
change, so each new set of rectangles in a napari shapes layer makes vispy regenerate, compile
and link the programs of the layer's face and highlight meshes inside the next canvas draw, on
the GUI thread (about 20 ms of a re-prompt's display with a software renderer; see
``bench/bench_plugin_stalls.py``). For per-vertex or single RGBA colours, which is all a
top-patch layer draws, that function is the same pass-through every time. Here each mesh of
such a layer keeps the first one it built: vispy leaves a program alone when the function
assigned to it is the one it already holds, and only the vertex buffers are uploaded.

This builds on napari's shapes visual (``canvas.layer_to_visual[layer].node`` with
``shape_faces`` and ``shape_highlights``; napari 0.9 with vispy 0.17 here). Where they
differ, nothing is changed and the layer recompiles on new data, as it always does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["keep_mesh_shaders"]


def _shape_meshes(viewer: Any, layer: Any) -> tuple[Any, ...]:
    """The face and highlight meshes of ``layer``'s canvas visual, or () where napari differs."""
    try:
        viewer = getattr(viewer, "__wrapped__", viewer)
        node = viewer.window._qt_viewer.canvas.layer_to_visual[layer].node
        meshes = (node.shape_faces, node.shape_highlights)
        for mesh in meshes:
            if not callable(mesh._build_color_transform):
                return ()
    except Exception:  # another napari or vispy, or a viewer without a canvas
        return ()
    return meshes


def _current_function(mesh: Any) -> Any:
    """The colour-transform function ``mesh``'s programs hold now when it is the RGBA
    pass-through (napari builds a shapes layer's face mesh as it adds the layer), else None."""
    from vispy.visuals.shaders import Function, FunctionChain

    try:
        current = mesh.shared_program.vert["color_transform"]
    except (KeyError, AttributeError):
        return None
    if isinstance(current, Function) and not isinstance(current, FunctionChain):
        return current
    return None


def _reusing(build: Callable[[Any], Any], current: Any = None) -> Callable[[Any], Any]:
    """``build(colors)``, except that RGBA colours always get one function: ``current`` (the
    one the programs hold already), or else the first one built."""
    built: list[Any] = [] if current is None else [current]

    def build_color_transform(colors: Any) -> Any:
        if colors.ndim == 2 and colors.shape[1] == 1:  # values through a colour map
            return build(colors)
        if not built:
            built.append(build(colors))
        return built[0]

    build_color_transform.keeps_rgba_function = True  # type: ignore[attr-defined]
    return build_color_transform


def keep_mesh_shaders(viewer: Any, layer: Any) -> bool:
    """Make the meshes of shapes ``layer`` keep their shader programs across new data.

    Call it once the layer is in ``viewer`` (its canvas visual exists); calling it again does
    nothing. Returns True when the layer's meshes keep their programs from now on.
    """
    meshes = _shape_meshes(viewer, layer)
    for mesh in meshes:
        build = mesh._build_color_transform
        if not getattr(build, "keeps_rgba_function", False):
            mesh._build_color_transform = _reusing(build, _current_function(mesh))
    return bool(meshes)
