"""Every patch of napari or vispy private state, applied only on the versions it was written for.

Two patches make a dock's first result draw without stalls on the GUI thread:

- **Glyphs** (:func:`prerender_glyphs`). napari draws canvas text with signed-distance-field
  glyphs that it makes the first time a character is drawn: a Qt raster of the character at
  256 pt, then a distance field and a resampling on the CPU, 10 - 40 ms per character, inside a
  canvas draw on the GUI thread. The first rank label a dock shows needs about 17 of them (its
  own characters and the nine napari measures the line height with): a 300 - 600 ms stall. Here
  the raster and the distance field are made in a worker thread; the GUI thread only copies each
  small bitmap into the canvas's glyph atlas (well under 1 ms a glyph). Builds on napari's font
  classes (``napari._vispy.utils.qt_font``).
- **Mesh shaders** (:func:`keep_mesh_shaders`). vispy's ``MeshVisual`` builds a new
  colour-transform shader function every time its data change, so each new set of rectangles in
  a napari shapes layer makes vispy regenerate, compile and link the programs of the layer's face
  and highlight meshes inside the next canvas draw, on the GUI thread (about 20 ms of a
  re-prompt's display with a software renderer; see ``bench/bench_plugin_stalls.py``). For
  per-vertex or single RGBA colours, which is all a top-patch layer draws, that function is the
  same pass-through every time: each mesh of such a layer keeps the first one it built (vispy
  leaves a program alone when the function assigned to it is the one it already holds, and only
  the vertex buffers are uploaded). Builds on napari's shapes visual
  (``canvas.layer_to_visual[layer].node`` with ``shape_faces`` and ``shape_highlights``).

A third keeps hidden layers out of each pan's frame:

- **Hidden layers' draw updates** (:func:`skip_draw_updates_while_hidden`). On every draw
  napari calls each layer's ``_update_draw`` (its view corners through its transforms, its
  level, a shapes layer's highlight), hidden or not. A dock's hidden result layers (eight
  for a TopK exam, waiting for a result) then slow every frame of a pan. The patched layer
  skips that update while hidden; shown again, napari refreshes it and the draw that follows
  updates it. Builds on ``Layer._update_draw`` and napari calling it after each draw.

A fourth keeps a shapes layer's empty highlight out of each frame:

- **Empty highlights** (:func:`hide_empty_highlights`). napari draws a shapes layer as five
  vispy visuals (faces, highlight mesh, highlight lines, highlight vertices, text), and draws
  the three highlight visuals on every frame even when nothing is selected or hovered (a
  placeholder triangle, a zero-size marker). Each draw is a program bound, its uniforms set
  and its commands parsed, in Python: a TopK exam with both breasts' results shows four
  shapes layers, 12 empty highlight draws a frame. The patched layer's highlight visuals are
  hidden while napari has nothing to highlight and shown as soon as it has (a selection, a
  hovered shape in select mode). Builds on napari's ``VispyShapesLayer._on_highlight_change``
  and its ``ShapesVisual`` sub-visuals.

And one makes a result layer's fill re-read the viewer's extent once:

- **One dims update per fill** (:func:`one_dims_update`). napari recomputes the viewer's dims
  (every layer's extent, units and axis labels) on each data, scale, translate or affine event
  of any layer, and a shapes layer emits its data event twice for one new set of rectangles
  (before and after): with a TopK exam's 24 layers, 3 - 7 ms each on the GUI thread. Inside
  the context the viewer's handler (``ViewerModel._on_layers_change``) is blocked for that
  layer's events, and runs once at the end. When the new extent moves the dims' range (a
  result's box on the image's edge, a raster pixel smaller than a source pixel: a fraction of
  a pixel), napari re-slices every layer (``ViewerModel._update_layers``, 50 - 100 ms with a
  four-view exam's layers). With every dimension on screen (no slider) no slice depends on
  the dims' point, so that re-slice is skipped; with a slider it runs as always.

The docks' jobs are listed in napari's task list through the window's private registration
(``_job_status``, patch "task_status"), under the same version gate.

Each patch names the napari and vispy versions it was written for (``WRITTEN_FOR``, inclusive
(major, minor) ranges). With any other version, or where the private state is not where the
patch expects it, nothing is patched: napari makes glyphs at first draw and recompiles meshes on
new data, as it always does, and the first refusal is logged once per patch.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from napari_medvl._event_turns import when_ready

__all__ = [
    "LABEL_CHARACTERS",
    "LINE_HEIGHT_CHARACTERS",
    "WRITTEN_FOR",
    "hide_empty_highlights",
    "keep_mesh_shaders",
    "one_dims_update",
    "patch_applies",
    "prerender_glyphs",
    "skip_draw_updates_while_hidden",
]

_LOG = logging.getLogger(__name__)

Version = tuple[int, int]
WRITTEN_FOR: dict[str, dict[str, tuple[Version, Version]]] = {
    "glyphs": {"napari": ((0, 6), (0, 9)), "vispy": ((0, 14), (0, 17))},
    "mesh_shaders": {"napari": ((0, 9), (0, 9)), "vispy": ((0, 17), (0, 17))},
    "hidden_draw_updates": {"napari": ((0, 9), (0, 9))},
    "dims_updates": {"napari": ((0, 9), (0, 9))},
    "empty_highlights": {"napari": ((0, 9), (0, 9))},
    "task_status": {"napari": ((0, 9), (0, 9))},
}
"""Patch -> package -> (oldest, newest) (major, minor) version the patch was written for."""

_announced: set[str] = set()  # patches whose refusal has been logged


def _version(package: str) -> str:
    """``package.__version__`` ("" when it has none)."""
    import importlib

    return str(getattr(importlib.import_module(package), "__version__", ""))


def _major_minor(version: str) -> Version | None:
    """(major, minor) of a version string such as "0.9.2" or "0.10.0.dev3", None if unreadable."""
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def patch_applies(patch: str) -> bool:
    """True when the installed napari and vispy are the versions ``patch`` (a key of
    ``WRITTEN_FOR``) was written for; otherwise False, logged once per patch."""
    found = {package: _version(package) for package in WRITTEN_FOR[patch]}
    for package, (oldest, newest) in WRITTEN_FOR[patch].items():
        version = _major_minor(found[package])
        if version is None or not oldest <= version <= newest:
            if patch not in _announced:
                _announced.add(patch)
                _LOG.warning(
                    "napari-medvl leaves napari unpatched (%s): written for %s, found %s.",
                    patch,
                    ", ".join(
                        f"{name} {low[0]}.{low[1]} - {high[0]}.{high[1]}"
                        for name, (low, high) in WRITTEN_FOR[patch].items()
                    ),
                    ", ".join(f"{name} {value or 'unknown'}" for name, value in found.items()),
                )
            return False
    return True


# --------------------------------------------------------------------------- glyphs

LINE_HEIGHT_CHARACTERS = "ÅÉÑŐjgpqy"
"""Characters vispy measures every text's line height with (drawn with the first text)."""
LABEL_CHARACTERS = " #-.0123456789"
"""Every character a rank label ``#{rank} {score:.3f}`` can hold (a top patch's two-line label
also holds a line break, which vispy lays out without a glyph)."""


def _canvas_font(viewer: Any) -> Any | None:
    """The viewer's canvas font that napari text layers draw with, or None.

    A dock gets the viewer behind napari's public-only proxy; the font is reached on the
    viewer itself (``__wrapped__``), read only, and only here.
    """
    try:
        viewer = getattr(viewer, "__wrapped__", viewer)
        font_info = viewer.window._qt_viewer.canvas.font_info
        font_info = font_info() if callable(font_info) else font_info  # a method in napari 0.9
        font = font_info.font_manager.get_font(font_info.face, False, False)
        for name in ("_glyphs", "_atlas", "_renderer", "_qfont", "_spread", "ratio"):
            getattr(font, name)
    except Exception:  # another napari: it makes glyphs at first draw, as always
        return None
    return font


def _glyph_tile(
    font: Any, qfont: Any, metrics: Any, character: str
) -> tuple[dict[str, Any], np.ndarray]:
    """One glyph's napari record and its atlas tile [h, w, 3] uint8 (distance field).

    The tile is what napari's own loader stores: the 256 pt raster padded by the font's
    spread, turned into a distance field and resampled to 1 / ratio of its size.
    """
    from napari._vispy.utils.qt_font import _load_glyph_qt

    made: dict[str, dict[str, Any]] = {}
    _load_glyph_qt(qfont, metrics, character, made)
    glyph = made[character]
    raster = glyph["bitmap"]
    spread = font._spread
    padded = np.zeros((raster.shape[0] + 2 * spread, raster.shape[1] + 2 * spread), np.uint8)
    padded[spread:-spread, spread:-spread] = raster
    height, width = padded.shape[0] // font.ratio, padded.shape[1] // font.ratio
    tile = np.zeros((height, width, 3), np.uint8)
    font._renderer.render_to_texture(padded, tile, (0, 0), (width, height))
    glyph["kerning"] = {}
    return glyph, tile


def _store(font: Any, character: str, glyph: dict[str, Any], tile: np.ndarray) -> None:
    """Put a prerendered glyph into the font's atlas and glyph table (GUI thread), with the
    kerning against the glyphs already there, as napari's loader records it."""
    if character in font._glyphs:
        return
    height, width = tile.shape[:2]
    region = font._atlas.get_free_region(width + 2, height + 2)
    if region is None:  # atlas full: napari's loader reports it when it needs the glyph
        return
    x, y = region[0] + 1, region[1] + 1
    font._atlas[y : y + height, x : x + width, :] = tile
    rows, cols = font._atlas.shape[:2]
    glyph["size"] = (width, height)
    glyph["texcoords"] = (x / cols, y / rows, (x + width) / cols, (y + height) / rows)
    metrics, advance = font._metrics, glyph["advance"]
    for other_character, other in font._glyphs.items():
        glyph["kerning"][other_character] = (
            metrics.horizontalAdvance(other_character + character) - other["advance"] - advance
        )
        other["kerning"][character] = (
            metrics.horizontalAdvance(character + other_character) - advance - other["advance"]
        )
    font._glyphs[character] = glyph


def prerender_glyphs(
    parent: Any, viewer: Any, characters: str = LINE_HEIGHT_CHARACTERS + LABEL_CHARACTERS
) -> threading.Event:
    """Make the glyphs of ``characters`` for ``viewer``'s canvas text in a worker thread and
    store them on a later event-loop turn; the returned event is set once they are stored
    (or at once when there is nothing to do). ``parent``: the Qt widget the turn belongs to.
    """
    stored = threading.Event()
    font: Any = _canvas_font(viewer) if patch_applies("glyphs") else None
    missing = [c for c in dict.fromkeys(characters) if font is not None and c not in font._glyphs]
    if not missing:
        stored.set()
        return stored
    from qtpy.QtGui import QFont, QFontMetricsF

    made: list[tuple[str, dict[str, Any], np.ndarray]] = []
    computed = threading.Event()

    def compute() -> None:
        try:
            qfont = QFont(font._qfont)  # a copy: the GUI thread draws with the original
            metrics = QFontMetricsF(qfont)
            for character in missing:
                made.append((character, *_glyph_tile(font, qfont, metrics, character)))
        except Exception:  # napari makes whatever is missing at first draw
            pass
        finally:
            computed.set()

    def store() -> None:
        try:
            for character, glyph, tile in made:
                _store(font, character, glyph, tile)
        finally:
            stored.set()

    threading.Thread(target=compute, name="medvl-glyphs", daemon=True).start()
    when_ready(parent, computed, store)
    return stored


# --------------------------------------------------------------------------- mesh shaders


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
    meshes = _shape_meshes(viewer, layer) if patch_applies("mesh_shaders") else ()
    for mesh in meshes:
        build = mesh._build_color_transform
        if not getattr(build, "keeps_rgba_function", False):
            mesh._build_color_transform = _reusing(build, _current_function(mesh))
    return bool(meshes)


# --------------------------------------------------------------------------- highlights

_HIGHLIGHT_VISUALS = ("shape_highlights", "highlight_vertices", "highlight_lines")
_MANY_SELECTED = 1000  # napari defers the highlight of more selected shapes to the next frame


def _show_highlights_in_use(layer: Any, node: Any) -> None:
    """Show each highlight visual of shapes ``layer`` that has something to draw, hide the
    others (what napari's highlight update just drew, computed again)."""
    if len(layer.selected_data) > _MANY_SELECTED:  # napari fills them a frame later
        outline = corners = lines = True
    else:
        vertices, faces = layer._outline_shapes()
        outline = vertices is not None and len(vertices) > 0 and len(faces) > 0
        corners, _, _, box, _ = layer._compute_vertices_and_box()
        lines = box is not None and len(box) > 0
        corners = corners is not None and len(corners) > 0
    node.shape_highlights.visible = outline
    node.highlight_vertices.visible = corners
    node.highlight_lines.visible = lines


def hide_empty_highlights(viewer: Any, layer: Any) -> bool:
    """Keep the highlight visuals of shapes ``layer`` hidden while they have nothing to draw
    (module notes). Call it once the layer is in ``viewer``; calling it again does nothing.
    Returns True when the layer's empty highlights are hidden from now on."""
    if not patch_applies("empty_highlights"):
        return False
    try:
        viewer = getattr(viewer, "__wrapped__", viewer)
        layer = getattr(layer, "__wrapped__", layer)
        visual = viewer.window._qt_viewer.canvas.layer_to_visual[layer]
        node = visual.node
        update = visual._on_highlight_change
        if not all(hasattr(node, name) for name in _HIGHLIGHT_VISUALS):
            return False
    except Exception:  # another napari, or a viewer without a canvas
        return False
    if getattr(update, "hides_empty", False):
        return True

    def on_highlight_change() -> None:
        update()
        _show_highlights_in_use(layer, node)

    on_highlight_change.hides_empty = True  # type: ignore[attr-defined]
    visual._on_highlight_change = on_highlight_change  # napari looks it up at each event
    _show_highlights_in_use(layer, node)
    return True


# --------------------------------------------------------------------------- hidden layers


def skip_draw_updates_while_hidden(layer: Any) -> bool:
    """Make napari skip ``layer``'s per-draw update while the layer is hidden (module notes);
    calling it again does nothing. Returns True when the layer skips them from now on. A
    dock's layer may come wrapped in napari's public-only proxy: the layer itself
    (``__wrapped__``) is patched."""
    layer = getattr(layer, "__wrapped__", layer)
    update = getattr(layer, "_update_draw", None)
    if update is None or not patch_applies("hidden_draw_updates"):
        return False
    if getattr(update, "skips_hidden", False):
        return True

    def update_draw(scale_factor: Any, corner_pixels_displayed: Any, shape_threshold: Any) -> None:
        if layer.visible:
            update(scale_factor, corner_pixels_displayed, shape_threshold)

    update_draw.skips_hidden = True  # type: ignore[attr-defined]
    layer._update_draw = update_draw
    return True


# --------------------------------------------------------------------------- dims updates

_EXTENT_EVENTS = ("data", "scale", "translate", "rotate", "shear", "affine", "units", "axis_labels")
"""The layer events napari's viewer recomputes its dims on (``ViewerModel._add_layer``)."""


@contextmanager
def one_dims_update(viewer: Any, layer: Any) -> Iterator[None]:
    """Changes made to ``layer`` inside update the viewer's dims once, at the end (module
    notes); where the patch does not apply, napari updates them on every event as always."""
    layer = getattr(layer, "__wrapped__", layer)
    viewer = getattr(viewer, "__wrapped__", viewer)
    update = getattr(viewer, "_on_layers_change", None)
    emitters = [getattr(layer.events, name, None) for name in _EXTENT_EVENTS]
    if update is None or not patch_applies("dims_updates"):
        yield
        return
    with ExitStack() as blocked:
        for emitter in emitters:
            if emitter is not None:
                blocked.enter_context(emitter.blocker(update))
        yield
    dims, reslice = viewer.dims, getattr(viewer, "_update_layers", None)
    all_on_screen = dims.ndim == dims.ndisplay
    with ExitStack() as blocked:
        if all_on_screen and reslice is not None:
            for emitter in (dims.events.point, dims.events.current_step):
                blocked.enter_context(emitter.blocker(reslice))
        update()
    if reslice is not None and all_on_screen and dims.ndim != dims.ndisplay:
        reslice()  # the layer brought a dimension off screen: every layer needs its slice
