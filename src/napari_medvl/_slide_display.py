"""A slide layer's pixels as the viewer reads them: progressive levels that refresh the layer.

The reader gives napari :class:`~napari_medvl._progressive_levels.ProgressiveLevel` levels,
so no read of a slide window decodes on the GUI thread. Decoded blocks refresh the slide's
layer on the GUI thread once the worker has no block left to decode (the view is complete),
or ``MAX_REFRESH_WAIT_MS`` after the first block not yet shown when decoding goes on (a pan
keeps asking for blocks): each refresh re-reads the view and redraws the window, so one
refresh per finished view instead of one per block keeps a pan's frames to the pan's own.
A tile that cannot be decoded is reported once in one sentence.

Napari's own synchronous slicing is kept: on this display the progressive levels pan as
fast as the same pyramid held in memory, and while a first heatmap is computed they pan more
smoothly than napari's asynchronous slicing does (``bench/bench_plugin_stalls.py`` and
``bench/bench_first_heatmap.py``; docs/performance.md). A user who turns asynchronous slicing on
(napari's preferences, ``NAPARI_ASYNC=1``) gets the slide's plain dask levels, which napari
then decodes in its slicing thread.
"""

from __future__ import annotations

from typing import Any

from qtpy import QtCore
from qtpy.QtCore import QObject, Qt, QTimer

from napari_medvl._notify import report_error
from napari_medvl._progressive_levels import BLOCK_TARGET_PX, BlockStore, progressive_levels

Signal = QtCore.Signal  # type: ignore[attr-defined]  # qtpy's alias of pyqtSignal

__all__ = [
    "MAX_REFRESH_WAIT_MS",
    "REFRESH_MS",
    "SlideRefresher",
    "display_levels",
    "napari_slices_asynchronously",
]

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
    the user turned on napari's asynchronous slicing: napari then decodes off the GUI thread
    itself, whole dask chunks at a time."""
    from qtpy.QtWidgets import QApplication

    if QApplication.instance() is None or napari_slices_asynchronously():
        return None
    refresher = SlideRefresher(slide)
    levels = progressive_levels(
        slide.levels, slide.tile_sizes, refresher.block_ready, block_target_px=block_target_px
    )
    refresher.store = levels[0].store
    return levels


def napari_slices_asynchronously() -> bool:
    """Whether napari's asynchronous slicing is on (the user's choice: napari's preferences,
    its settings file or ``NAPARI_ASYNC``)."""
    from napari.settings import get_settings

    return bool(get_settings().experimental.async_)
