"""Slide levels for napari that answer every read at once and decode in a worker thread.

napari reads the visible window of a multiscale level on the GUI thread (synchronous slicing):
a window over tiles not yet decoded (JPEG 2000: 20 - 60 ms a tile) held the GUI 0.2 - 1.2 s
per pan step. A :class:`ProgressiveLevel` answers from decoded blocks (tile-aligned, about
``BLOCK_TARGET_PX`` a side) and paints blocks not decoded yet from the next coarser level
(nearest-neighbour, so a blurred preview at once), then asks :class:`BlockStore` for them: one
worker thread (at a lower priority, decoding a block's tiles itself, one core) decodes the
newest requests first, keeps blocks in a least-recently-used cache
within a byte budget and calls ``on_block`` after each, so the viewer re-reads the window and
shows it sharp. Pure Python and numpy: the plugin passes the callback that refreshes the layer
on the GUI thread.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "BLOCK_TARGET_PX",
    "BlockStore",
    "ProgressiveLevel",
    "block_shape",
    "progressive_levels",
]

BLOCK_TARGET_PX = 256
"""Preferred block side (px); a whole number of native tiles, at least one (one tile for the
usual 240 / 256 px tiles). napari reads a view widened to whole chunks and uploads it as one
texture: with one-tile blocks the texture stays near the view's size, and on a software
renderer a pan's worst gap was 1.07x - 1.56x lower than with 1024 px blocks in each of six
runs of ``bench/bench_plugin_stalls.py``."""
CACHE_BYTES = 768 * 2**20
"""Decoded blocks kept per slide (about 4,000 blocks of 256 x 256 RGB)."""
MAX_CHUNK_PX = 512
"""Largest chunk side stated to napari (blocks of strip-organised files can be wider)."""
MAX_WANTED = 1024
"""Blocks waiting for the worker; older requests beyond it are dropped (panned away)."""
WORKER_IDLE_EXIT_S = 20.0
"""An idle worker ends after this long, so a closed slide's store (and its cache) is freed."""
MAX_PREVIEWS = 192
"""Block previews kept per level (upsampled from the coarser level) until their block arrives."""
BACKGROUND = 255  # white, as a slide's background and read_region outside the slide

BlockKey = tuple[int, int, int]  # (level, block row, block column)


def block_shape(tile_hw: Sequence[int], target: int = BLOCK_TARGET_PX) -> tuple[int, int]:
    """(rows, cols) of a block: the most whole tiles that fit ``target``, at least one."""
    return tuple(max(1, target // max(1, int(t))) * max(1, int(t)) for t in tile_hw)  # type: ignore[return-value]


class BlockStore:
    """Decoded blocks [bh, bw, C] of every level of one slide, filled by one worker thread.

    ``levels``: array-likes [H_l, W_l, C] (a read ``level[y0:y1, x0:x1]`` may decode);
    ``block_shapes``: (rows, cols) per level. ``on_block()`` is called from the worker after
    each block is stored. A block that fails to decode is stored as background and its error
    kept for :meth:`take_error`.
    """

    def __init__(
        self,
        levels: Sequence[Any],
        block_shapes: Sequence[tuple[int, int]],
        on_block: Callable[[], None] = lambda: None,
        budget_bytes: int = CACHE_BYTES,
    ) -> None:
        self.levels = list(levels)
        self.block_shapes = [tuple(int(v) for v in shape) for shape in block_shapes]
        self.on_block = on_block
        self.budget_bytes = int(budget_bytes)
        self.idle_exit_s = WORKER_IDLE_EXIT_S
        self._blocks: OrderedDict[BlockKey, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._wanted: OrderedDict[BlockKey, None] = OrderedDict()
        self._reading: BlockKey | None = None
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def block(self, key: BlockKey) -> np.ndarray | None:
        """The decoded block, or None when it is not (yet) in the cache."""
        with self._changed:
            block = self._blocks.get(key)
            if block is not None:
                self._blocks.move_to_end(key)
            return block

    def request(self, keys: Sequence[BlockKey]) -> None:
        """Queue blocks for decoding, ahead of everything asked for before."""
        with self._changed:
            if self._closed:
                return
            for key in reversed(keys):  # the first key ends newest: decoded first
                if key not in self._blocks and key != self._reading:
                    self._wanted[key] = None
                    self._wanted.move_to_end(key)
            while len(self._wanted) > MAX_WANTED:
                self._wanted.popitem(last=False)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="medvl-slide-blocks", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def idle(self) -> bool:
        """True when no block is waiting or being decoded."""
        with self._changed:
            return not self._wanted and self._reading is None

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until :meth:`idle` (True) or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._wanted or self._reading is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def take_error(self) -> BaseException | None:
        """The first decoding error since the last call, or None."""
        with self._changed:
            error, self._error = self._error, None
            return error

    def close(self) -> None:
        """Stop the worker and drop the cache."""
        with self._changed:
            self._closed = True
            self._wanted.clear()
            self._blocks.clear()
            self._bytes = 0
            self._changed.notify_all()

    def bounds(self, key: BlockKey) -> tuple[int, int, int, int]:
        """(y0, y1, x0, x1) of a block in its level's px."""
        level, row, col = key
        rows, cols = self.block_shapes[level]
        height, width = self.levels[level].shape[:2]
        return row * rows, min((row + 1) * rows, height), col * cols, min((col + 1) * cols, width)

    def _work(self) -> None:
        from medvl_engine.io.slide.pixel_sources import serial_decoding

        _lower_thread_priority()
        with serial_decoding():
            self._serve()

    def _serve(self) -> None:
        while True:
            with self._changed:
                while not self._wanted and not self._closed:
                    if not self._changed.wait(self.idle_exit_s):
                        self._thread = None  # idle: the next request starts another
                        return
                if self._closed:
                    return
                key, _ = self._wanted.popitem(last=True)
                self._reading = key
            block = self._decode(key)
            with self._changed:
                self._reading = None
                if not self._closed:
                    self._store(key, block)
                self._changed.notify_all()
            try:
                self.on_block()
            except RuntimeError:  # the viewer's Qt objects are gone (closed): nothing to show
                pass

    def _decode(self, key: BlockKey) -> np.ndarray:
        y0, y1, x0, x1 = self.bounds(key)
        level = self.levels[key[0]]
        try:
            return np.ascontiguousarray(np.asarray(level[y0:y1, x0:x1]))
        except Exception as error:  # shown once by the plugin; the block reads as background
            with self._changed:
                self._error = self._error or error
            return np.full((y1 - y0, x1 - x0, *level.shape[2:]), BACKGROUND, level.dtype)

    def _store(self, key: BlockKey, block: np.ndarray) -> None:
        self._blocks[key] = block
        self._bytes += block.nbytes
        while self._bytes > self.budget_bytes and len(self._blocks) > 1:
            _, dropped = self._blocks.popitem(last=False)
            self._bytes -= dropped.nbytes


def _lower_thread_priority(niceness: int = 10) -> None:
    """Make the calling thread yield the CPU to the GUI thread and the renderer (Linux: a
    thread's own nice value); elsewhere the thread keeps its priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except (AttributeError, OSError):  # not Linux, or not permitted: decoding still works
        pass


def _window(key: Any, shape: tuple[int, ...]) -> tuple[int, int, int, int, Any] | None:
    """(y0, y1, x0, x1, channel key) of a basic 2-D window index, or None for any other."""
    key = key if isinstance(key, tuple) else (key,)
    if len(key) > len(shape) or any(k is Ellipsis for k in key):
        return None
    key = key + (slice(None),) * (len(shape) - len(key))
    spans = []
    for index, length in zip(key[:2], shape[:2], strict=True):
        if not isinstance(index, slice) or index.step not in (None, 1):
            return None
        start, stop, _ = index.indices(length)
        spans.append((start, max(start, stop)))
    (y0, y1), (x0, x1) = spans
    return y0, y1, x0, x1, key[2:]


class ProgressiveLevel:
    """One level [H, W, C] of a slide as napari reads it: never decodes on the reading thread.

    ``level[y0:y1, x0:x1]`` copies decoded blocks and paints the rest from ``coarser`` (the
    next coarser ProgressiveLevel, nearest-neighbour; background where there is none), then
    asks the store for the missing blocks. Any other index reads the level directly.
    """

    def __init__(self, store: BlockStore, index: int, coarser: ProgressiveLevel | None) -> None:
        self.store = store
        self.index = index
        self.coarser = coarser
        level = store.levels[index]
        self.shape = tuple(int(v) for v in level.shape)
        self.dtype = np.dtype(level.dtype)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.chunks = (
            *(min(int(side), MAX_CHUNK_PX) for side in store.block_shapes[index]),
            *self.shape[2:],
        )
        """The block grid, at most ``MAX_CHUNK_PX`` a side, stated as a zarr array states its
        chunks: napari widens the view's window to whole chunks and re-reads the level only
        when a pan leaves them. A block of a striped file spans the level's whole width; its
        chunks do not, so napari's window (and texture) stays near the view's size."""
        self._previews: dict[BlockKey, np.ndarray] = {}

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[:, :]
        return whole if dtype is None else whole.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        window = _window(key, self.shape)
        if window is None:
            return np.asarray(self.store.levels[self.index][key])
        y0, y1, x0, x1, channels = window
        out, _ = self._read(y0, y1, x0, x1)
        return out[(slice(None), slice(None), *channels)] if channels else out

    def _read(self, y0: int, y1: int, x0: int, x1: int) -> tuple[np.ndarray, bool]:
        """The window [y1 - y0, x1 - x0, C] and whether it is exact (no preview in it)."""
        out = np.empty((y1 - y0, x1 - x0, *self.shape[2:]), self.dtype)
        rows, cols = self.store.block_shapes[self.index]
        missing: list[BlockKey] = []
        for row in range(y0 // rows, -(-y1 // rows)):
            for col in range(x0 // cols, -(-x1 // cols)):
                key = (self.index, row, col)
                by0, by1, bx0, bx1 = self.store.bounds(key)
                top, bottom, left, right = max(y0, by0), min(y1, by1), max(x0, bx0), min(x1, bx1)
                block = self.store.block(key)
                if block is None:
                    block = self._block_preview(key)
                    missing.append(key)
                else:
                    self._previews.pop(key, None)
                out[top - y0 : bottom - y0, left - x0 : right - x0] = block[
                    top - by0 : bottom - by0, left - bx0 : right - bx0
                ]
        if missing:
            self.store.request(missing)
        return out, not missing

    def _block_preview(self, key: BlockKey) -> np.ndarray:
        """A whole block's preview from the coarser level, kept once the coarser pixels it
        came from were all decoded (a pan re-reads it as a copy)."""
        preview = self._previews.get(key)
        if preview is not None:
            return preview
        y0, y1, x0, x1 = self.store.bounds(key)
        shape = (y1 - y0, x1 - x0, *self.shape[2:])
        if self.coarser is None:
            return np.full(shape, BACKGROUND, self.dtype)
        coarse_h, coarse_w = self.coarser.shape[:2]
        rows = _nearest(y0, y1, coarse_h / self.shape[0], coarse_h)
        cols = _nearest(x0, x1, coarse_w / self.shape[1], coarse_w)
        coarse, exact = self.coarser._read(
            int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
        )
        preview = np.take(np.take(coarse, rows - rows[0], axis=0), cols - cols[0], axis=1)
        assert isinstance(preview, np.ndarray)
        if exact:
            self._previews[key] = preview
            while len(self._previews) > MAX_PREVIEWS:
                self._previews.pop(next(iter(self._previews)))
        return preview


def _nearest(start: int, stop: int, scale: float, length: int) -> np.ndarray:
    """Coarse index [stop - start] of each fine pixel's centre, ``scale`` coarse px a fine px."""
    centres = (np.arange(start, stop, dtype=np.float64) + 0.5) * scale
    return np.minimum(centres.astype(np.int64), length - 1)


def progressive_levels(
    levels: Sequence[Any],
    tile_sizes: Sequence[tuple[int, int]],
    on_block: Callable[[], None] = lambda: None,
    budget_bytes: int = CACHE_BYTES,
    block_target_px: int = BLOCK_TARGET_PX,
) -> list[ProgressiveLevel]:
    """ProgressiveLevels over a slide's ``levels`` (finest first) sharing one BlockStore; the
    coarsest level's blocks are requested at once, so previews are ready early."""
    shapes = [block_shape(tile, block_target_px) for tile in tile_sizes]
    store = BlockStore(levels, shapes, on_block, budget_bytes)
    wrapped: list[ProgressiveLevel] = []
    coarser: ProgressiveLevel | None = None
    for index in reversed(range(len(levels))):
        coarser = ProgressiveLevel(store, index, coarser)
        wrapped.insert(0, coarser)
    coarsest = wrapped[-1]
    coarsest[:, :]  # noqa: B018 - asks for every block of the coarsest level
    return wrapped
