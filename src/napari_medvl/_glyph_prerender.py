"""Rank-label glyphs made before napari needs them, the costly part off the GUI thread.

napari draws canvas text with signed-distance-field glyphs that it makes the first time a
character is drawn: a Qt raster of the character at 256 pt, then a distance field and a
resampling on the CPU, 10 - 40 ms per character, inside a canvas draw on the GUI thread. The
first rank label a dock shows needs about 17 of them (its own characters and the nine napari
measures the line height with): a 300 - 600 ms stall. Here the raster and the distance field
are made in a worker thread; the GUI thread only copies each small bitmap into the canvas's
glyph atlas (well under 1 ms a glyph).

This builds on napari's font classes (``napari._vispy.utils.qt_font``, napari 0.6 - 0.9).
Where they differ, nothing is prerendered and napari makes the glyphs when it first draws
them, as it always does.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from napari_medvl._event_turns import when_ready

__all__ = ["LABEL_CHARACTERS", "LINE_HEIGHT_CHARACTERS", "prerender_glyphs"]

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


def _glyph_tile(font: Any, qfont: Any, metrics: Any, character: str) -> tuple[dict, np.ndarray]:
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


def _store(font: Any, character: str, glyph: dict, tile: np.ndarray) -> None:
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
    font = _canvas_font(viewer)
    missing = [c for c in dict.fromkeys(characters) if font is not None and c not in font._glyphs]
    if not missing:
        stored.set()
        return stored
    from qtpy.QtGui import QFont, QFontMetricsF

    made: list[tuple[str, dict, np.ndarray]] = []
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
