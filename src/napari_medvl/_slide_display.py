"""A slide layer's pixels as the viewer reads them: progressive levels that refresh the layer.

The reader gives napari :class:`~napari_medvl._progressive_levels.ProgressiveLevel` levels,
so no read of a slide window decodes on the GUI thread. Decoded blocks refresh the slide's
layer on the GUI thread once the worker has no block left to decode (the view is complete),
or ``MAX_REFRESH_WAIT_MS`` after the first block not yet shown when decoding goes on (a pan
keeps asking for blocks): each refresh re-reads the view and redraws the window, so one
refresh per finished view instead of one per block keeps a pan's frames to the pan's own.
A tile that cannot be decoded is reported once in one sentence.

With napari's asynchronous slicing on, the slide keeps its plain dask levels: napari decodes
them in its slicing thread. Opening a slide turns that slicing on for the session
(:func:`async_slicing_for_slides`) unless the user chose: ``NAPARI_ASYNC`` or napari's
settings file naming it, ``MEDVL_SYNC_SLICING=1``, or turning it off in napari's preferences
after the plugin turned it on. While a first heatmap is computed it pans closer to bare
napari's floor than the progressive levels do (``bench/bench_first_heatmap.py``,
docs/performance.md). It is not saved to the user's settings, and it is said once.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from qtpy import QtCore
from qtpy.QtCore import QObject, Qt, QTimer

from napari_medvl._notify import report_error
from napari_medvl._progressive_levels import BLOCK_TARGET_PX, BlockStore, progressive_levels

Signal = QtCore.Signal  # type: ignore[attr-defined]  # qtpy's alias of pyqtSignal

__all__ = [
    "MAX_REFRESH_WAIT_MS",
    "REFRESH_MS",
    "SYNC_SWITCH",
    "SlideRefresher",
    "async_slicing_for_slides",
    "display_levels",
]

_log = logging.getLogger(__name__)

SYNC_SWITCH = "MEDVL_SYNC_SLICING"
"""Environment variable: 1 keeps napari's synchronous slicing (the plugin's progressive
levels) when slides open."""
ASYNC_NAMES = ("async_", "async", "napari_async")
"""The names napari reads its asynchronous-slicing setting by (file keys, environment)."""
SWITCHED_ON = (
    "napari-medvl turned on napari's asynchronous slicing for this session: slides pan "
    "smoothly while a heatmap is computed. Your napari settings are unchanged; set "
    f"{SYNC_SWITCH}=1 (or NAPARI_ASYNC=0) to keep synchronous slicing."
)

REFRESH_MS = 20
"""Delay of the refresh once the worker is idle (blocks that arrive together: one refresh)."""
MAX_REFRESH_WAIT_MS = 400
"""Longest a decoded block waits to be shown while the worker still decodes others."""


class SlideRefresher(QObject):
    """Refreshes the current viewer's layers of ``slide`` when its blocks arrive."""

    _blocks_arrived = Signal()

    def __init__(self, slide: Any) -> None:
        super().__init__()
        self.slide = slide
        self.store: BlockStore | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._refresh)
        self._blocks_arrived.connect(self._schedule, Qt.ConnectionType.QueuedConnection)

    def block_ready(self) -> None:
        """From the worker thread, after each decoded block: schedule a refresh on the GUI
        thread (:meth:`_schedule`)."""
        self._blocks_arrived.emit()

    def _schedule(self) -> None:
        """A refresh ``REFRESH_MS`` from now when the worker is idle, else at most
        ``MAX_REFRESH_WAIT_MS`` after the first block not yet shown."""
        idle = self.store is None or self.store.idle()
        if idle and (not self._timer.isActive() or self._timer.remainingTime() > REFRESH_MS):
            self._timer.start(REFRESH_MS)
        elif not self._timer.isActive():
            self._timer.start(MAX_REFRESH_WAIT_MS)

    def layers(self) -> list[Any]:
        import napari

        viewer = napari.current_viewer()
        if viewer is None:
            return []
        return [layer for layer in viewer.layers if layer.metadata.get("slide") is self.slide]

    def _refresh(self) -> None:
        from medvl_engine.errors import MedVLError

        error = self.store.take_error() if self.store is not None else None
        if error is not None:
            name = getattr(self.slide.path, "name", str(self.slide.path))
            report_error(
                error
                if isinstance(error, MedVLError)
                else MedVLError(f"{name}: a tile could not be decoded; it shows as white.")
            )
        for layer in self.layers():
            layer.refresh()


def display_levels(slide: Any, block_target_px: int = BLOCK_TARGET_PX) -> list[Any] | None:
    """``slide``'s levels for napari, decoded off the GUI thread in blocks of about
    ``block_target_px``; None (the plain lazy dask levels) without a Qt application, or when
    napari's asynchronous slicing is on (:func:`async_slicing_for_slides` turns it on where
    the user has not chosen): napari then decodes off the GUI thread itself, whole dask chunks
    at a time, and pans the loaded chunks without re-reading."""
    from qtpy.QtWidgets import QApplication

    if QApplication.instance() is None or async_slicing_for_slides():
        return None
    refresher = SlideRefresher(slide)
    levels = progressive_levels(
        slide.levels, slide.tile_sizes, refresher.block_ready, block_target_px=block_target_px
    )
    refresher.store = levels[0].store
    return levels


_declined: set[int] = set()
"""ids of napari settings whose asynchronous slicing was turned off after the plugin turned it
on (the user's choice, for the rest of the session)."""
_said = False


def _chosen_by_user(settings: Any) -> bool:
    """True when napari's settings file or an environment variable names asynchronous
    slicing, or the user opted out with ``MEDVL_SYNC_SLICING``."""
    if os.environ.get(SYNC_SWITCH, "").strip().lower() in {"1", "true", "yes", "on"}:
        return True
    for source in ("config_file_settings", "env_settings"):
        experimental = (getattr(settings, source, None) or {}).get("experimental") or {}
        if any(name in experimental for name in ASYNC_NAMES):
            return True
    return False


def async_slicing_for_slides() -> bool:
    """Whether napari slices asynchronously now, after turning it on for this session where the
    user has not chosen (see the module notes): not saved to napari's settings file, said once
    as a notification."""
    from napari.settings import get_settings

    from napari_medvl._napari_compat import set_for_this_session

    global _said
    settings = get_settings()
    if settings.experimental.async_:
        return True
    if id(settings) in _declined or _chosen_by_user(settings):
        return False
    if not set_for_this_session(settings, "experimental", "async_", True):
        return False
    settings.experimental.events.async_.connect(_on_user_choice(settings))
    if not _said:
        _said = True
        _log.info(SWITCHED_ON)
        from napari_medvl._notify import report_info

        report_info(SWITCHED_ON)
    return True


def _on_user_choice(settings: Any) -> Any:
    """A callback for ``settings``' asynchronous-slicing events: turned off after the plugin
    turned it on, it stays off for the rest of the session (the user's choice, which napari
    saves as usual from then on)."""
    from napari_medvl._napari_compat import forget_for_this_session

    def turned_off(event: Any) -> None:
        if event.value:
            return
        _declined.add(id(settings))
        forget_for_this_session(settings, "experimental", "async_")
        settings.experimental.events.async_.disconnect(turned_off)

    return turned_off
