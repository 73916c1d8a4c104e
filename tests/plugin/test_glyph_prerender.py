"""Rank-label glyphs prerendered off the GUI thread draw exactly as napari's own."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from napari_medvl._napari_compat import LABEL_CHARACTERS, prerender_glyphs


def _rank_label(viewer):
    return viewer.add_shapes(
        [np.array([[10.0, 10.0], [60.0, 90.0]])],
        shape_type="rectangle",
        features={"rank": [7], "score": [-0.125]},
        text={"string": "#{rank} {score:.3f}", "size": 16, "color": "white"},
        face_color="transparent",
    )


def test_prerendered_rank_labels_draw_like_napari_and_make_no_glyph_in_a_draw(
    make_napari_viewer, qtbot, monkeypatch
):
    from napari._vispy.utils.qt_font import QtTextureFont

    made_in_draw: list[str] = []
    napari_load = QtTextureFont._load_char

    def counting_load(self, character):
        made_in_draw.append(character)
        return napari_load(self, character)

    monkeypatch.setattr(QtTextureFont, "_load_char", counting_load)
    shots = {}
    for prerendered in (False, True):
        viewer = make_napari_viewer(show=True)
        viewer.window.resize(800, 600)
        qtbot.wait(200)
        if prerendered:
            stored = prerender_glyphs(viewer.window._qt_window, viewer)
            qtbot.waitUntil(stored.is_set, timeout=20000)
        made_in_draw.clear()
        _rank_label(viewer)
        viewer.reset_view()
        shots[prerendered] = viewer.screenshot(canvas_only=True, flash=False)
        if prerendered:
            assert made_in_draw == []
        else:  # napari makes them while drawing: the stall this avoids
            assert set("#7 -0.125") <= set(made_in_draw)
    assert shots[True].shape == shots[False].shape
    label = np.any(shots[False][..., :3] != shots[False][0, 0, :3], axis=-1)
    assert label.sum() > 50  # the label (and the box) were drawn
    np.testing.assert_array_equal(shots[True], shots[False])


def test_prerender_is_a_no_op_where_napari_keeps_its_fonts_elsewhere():
    stored = prerender_glyphs(None, SimpleNamespace(window=SimpleNamespace()))
    assert stored.is_set()


@pytest.mark.parametrize("rank, score", [(1, 0.5), (1023456789, -0.25)])
def test_label_characters_cover_every_rank_label(rank, score):
    assert set(f"#{rank} {score:.3f}") <= set(LABEL_CHARACTERS)
