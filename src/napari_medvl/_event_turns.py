"""Work a dock spreads over Qt event-loop turns so that the GUI thread is never held long.

Adding a napari layer costs 0.2 - 0.8 s on the GUI thread (its canvas visual, its controls,
its shaders; for a first shapes layer also pandas and napari's shapes setup; for labels
every glyph drawn the first time). The docks therefore add their result layers empty before
any result, one per turn (``later``), import heavy modules in background threads
(``import_in_background``, ``when_ready``) and have napari render the glyphs of rank labels
a few per draw (``show_glyphs``) on a pending layer whose one label shows, in turn, every
character a rank label can hold (``GLYPH_RANKS`` with ``GLYPHS_SCORE``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "GLYPHS_SCORE",
    "GLYPH_RANKS",
    "GLYPH_STEP_MS",
    "IMPORT_POLL_MS",
    "import_in_background",
    "later",
    "show_glyph_rank",
    "show_glyphs",
    "viewer_open",
    "when_all_ready",
    "when_ready",
]

IMPORT_POLL_MS = 100  # how often a dock looks whether a background import is done
GLYPH_STEP_MS = 60  # between the labels that make napari render rank-label glyphs (one draw)
# A rank label "#{rank} {score:.Nf}" with these ranks in turn and this score shows every
# character any rank label can show ('#', ' ', '-', '.', all digits), a few new ones at a
# time (each new glyph costs napari about 10 - 20 ms of one draw).
GLYPH_RANKS = (1, 23, 456, 789, 1023456789)
GLYPHS_SCORE = -0.5


def later(parent: Any, delay_ms: int, action: Callable[[], None]) -> None:
    """Run ``action`` on the GUI thread after ``delay_ms``, unless the Qt widget ``parent``
    is gone by then (the timer is its child)."""
    from qtpy.QtCore import QTimer

    timer = QTimer(parent)
    timer.setSingleShot(True)
    timer.timeout.connect(action)
    timer.timeout.connect(timer.deleteLater)
    timer.start(delay_ms)


def viewer_open(viewer: Any) -> bool:
    """False once ``viewer`` is closed (napari's ``Window.close`` deletes its Qt window): a
    dock that is not docked outlives its viewer, and a layer added then breaks napari."""
    return hasattr(getattr(viewer, "window", None), "_qt_window")


def when_ready(parent: Any, ready: threading.Event, action: Callable[[], None]) -> None:
    """Run ``action`` on a later event-loop turn once ``ready`` is set (looked at every
    ``IMPORT_POLL_MS``); ``parent`` as for :func:`later`."""
    if ready.is_set():
        later(parent, 0, action)
    else:
        later(parent, IMPORT_POLL_MS, lambda: when_ready(parent, ready, action))


def import_in_background(*modules: str) -> threading.Event:
    """Import ``modules``, in order, in a background thread; the event is set when all are done.

    For imports a dock would otherwise make on the GUI thread: torch (the model registry;
    1 - 2.5 s), pandas (napari imports it when the first shapes layer is made; 0.2 - 0.5 s)
    and scipy.linalg (napari imports it the first time it decomposes a layer's transform, as
    a result layer placed on a hung view is drawn; 0.05 - 0.1 s). A failed import is left to
    the code that needs the module.
    """
    done = threading.Event()

    def run() -> None:
        try:
            for module in modules:
                try:
                    importlib.import_module(module)
                except Exception:  # reported where the module is used
                    pass
        finally:
            done.set()

    threading.Thread(target=run, name="medvl-import", daemon=True).start()
    return done


def show_glyph_rank(layer: Any, rank: int, pending_kind: str) -> bool:
    """Label a pending label layer's one box with ``rank`` (score ``GLYPHS_SCORE``); False
    once a result has filled the layer (its ``medvl_kind`` is no longer ``pending_kind``).
    A TopK marks layer (rim, box and plate of one box: a ``part`` column) gets the plate's
    ``label`` written with its ``label_format``."""
    if layer.metadata.get("medvl_kind") != pending_kind:
        return False
    features = layer.features.copy()  # other columns (a label's colour) stay
    parts = features["part"].to_numpy() if "part" in features else None
    if (len(layer.data) if parts is None else int((parts == "box").sum())) != 1:
        return False
    features["rank"], features["score"] = rank, GLYPHS_SCORE
    if parts is not None and "label" in features:
        label = str(layer.metadata["label_format"]).format(rank=rank, score=GLYPHS_SCORE)
        features["label"] = np.where(parts == "label", label, "").astype(object)
    layer.features = features
    return True


def show_glyphs(
    parent: Any, viewer: Any, layer: Any, pending_kind: str, ranks: tuple[int, ...]
) -> None:
    """Label the pending ``layer`` with each of ``ranks``, one draw (``GLYPH_STEP_MS``) apart,
    while it is in ``viewer`` and still pending."""
    if not ranks or not viewer_open(viewer) or layer not in viewer.layers:
        return
    if show_glyph_rank(layer, ranks[0], pending_kind):
        later(
            parent,
            GLYPH_STEP_MS,
            lambda: show_glyphs(parent, viewer, layer, pending_kind, ranks[1:]),
        )


def when_all_ready(parent: Any, events: list[threading.Event], action: Callable[[], None]) -> None:
    """Run ``action`` on a later event-loop turn once every event in ``events`` is set."""
    if all(event.is_set() for event in events):
        later(parent, 0, action)
    else:
        later(parent, IMPORT_POLL_MS, lambda: when_all_ready(parent, events, action))
