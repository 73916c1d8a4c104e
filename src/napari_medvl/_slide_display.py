"""A slide layer's pixels as the viewer reads them: progressive levels that refresh the layer.

The reader gives napari :class:`~napari_medvl._progressive_levels.ProgressiveLevel` levels,
so no read of a slide window decodes on the GUI thread; each block the worker decodes
refreshes the slide's layer (on the GUI thread, one refresh however many blocks arrived
meanwhile), and a tile that cannot be decoded is reported once in one sentence.
"""

from __future__ import annotations

import threading
from typing import Any

from qtpy.QtCore import QObject, Qt, QTimer, Signal

from napari_medvl._notify import report_error
from napari_medvl._progressive_levels import BlockStore, progressive_levels

__all__ = ["REFRESH_MS", "SlideRefresher", "display_levels"]

REFRESH_MS = 100


class SlideRefresher(QObject):
    """Refreshes the current viewer's layers of ``slide`` when its blocks arrive."""

    _blocks_arrived = Signal()

    def __init__(self, slide: Any) -> None:
        super().__init__()
        self.slide = slide
        self.store: BlockStore | None = None
        self._queued = threading.Event()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._refresh)
        self._blocks_arrived.connect(self._timer.start, Qt.ConnectionType.QueuedConnection)

    def block_ready(self) -> None:
        """From the worker thread: refresh on the GUI thread in ``REFRESH_MS``, once for all
        blocks that arrive meanwhile (each refresh re-reads the view and redraws)."""
        if not self._queued.is_set():
            self._queued.set()
            self._blocks_arrived.emit()

    def layers(self) -> list[Any]:
        import napari

        viewer = napari.current_viewer()
        if viewer is None:
            return []
        return [layer for layer in viewer.layers if layer.metadata.get("slide") is self.slide]

    def _refresh(self) -> None:
        from medvl_engine.errors import MedVLError

        self._queued.clear()
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


def display_levels(slide: Any) -> list[Any] | None:
    """``slide``'s levels for napari, decoded off the GUI thread; None (the plain lazy dask
    levels) without a Qt application, or when napari's asynchronous slicing is on: napari then
    decodes off the GUI thread itself, whole dask chunks at a time, and pans the loaded chunks
    without re-reading (``bench/bench_plugin_stalls.py``: about half the progressive levels'
    worst pan gap on 2 cores)."""
    from napari.settings import get_settings
    from qtpy.QtWidgets import QApplication

    if QApplication.instance() is None or get_settings().experimental.async_:
        return None
    refresher = SlideRefresher(slide)
    levels = progressive_levels(slide.levels, slide.tile_sizes, refresher.block_ready)
    refresher.store = levels[0].store
    return levels
