"""Lazy pyramid levels: pixel sources wrapped as dask arrays with tile-aligned chunks.

A *source* is any object with ``shape`` (H, W, 3), ``dtype`` uint8 and a
``read(y0, y1, x0, x1)`` method returning that window as a numpy array
[y1 - y0, x1 - x0, 3] (rows, columns in the level's own pixel frame).

Chunk boundaries fall on native tile boundaries, and a chunk holds many tiles
(about CHUNK_TARGET_PX a side): dask fuses a slice of a level into the chunk's
read, so a request such as ``level[y:y + 2048, x:x + 2048]`` decodes only the
tiles it touches, in a shared thread pool, while the number of dask tasks (each
costing milliseconds of scheduling and a copy) stays small.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

import dask.array as da
import numpy as np

from medvl_engine.common.reason import error_reason
from medvl_engine.errors import CorruptFileError, MedVLError

__all__ = [
    "LazyImages",
    "PositionalFile",
    "PixelSource",
    "as_dask_level",
    "chunk_grid",
    "closed_error",
    "decode_pool",
    "decode_workers",
    "for_each_in_parallel",
    "serial_decoding",
    "to_rgb",
    "wrap_decode_errors",
]

CHUNK_TARGET_PX = 4096
"""Preferred chunk side (px); a whole multiple of the native tile size."""

Item = TypeVar("Item")
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


class PixelSource(Protocol):
    """A level's pixels, readable by window; shape is (H, W, 3) uint8."""

    shape: tuple[int, int, int]
    dtype: np.dtype

    def read(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray: ...


_serial = threading.local()


def decode_workers() -> int:
    """Threads that decode tiles of one read (one per core, at least two; one inside
    :func:`serial_decoding`)."""
    if getattr(_serial, "on", False):
        return 1
    return max(2, os.cpu_count() or 2)


class serial_decoding:  # noqa: N801 - used as a context manager, like a function
    """Within this context the current thread decodes a read's tiles itself, one by one,
    leaving the other cores free (a background reader beside a display that must draw)."""

    def __enter__(self) -> None:
        self._before = getattr(_serial, "on", False)
        _serial.on = True

    def __exit__(self, *exc_info: object) -> None:
        _serial.on = self._before


def decode_pool() -> Executor:
    """The process-wide thread pool for tile decoding (created on first use).

    A forked child (e.g. a torch DataLoader worker) inherits the pool object
    but not its threads; it gets a fresh pool instead of waiting forever.
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            if not _fork_hook_registered:
                _register_fork_hook()
            _pool = ThreadPoolExecutor(
                max_workers=decode_workers(), thread_name_prefix="medvl-decode"
            )
        return _pool


_fork_hook_registered = False


def _register_fork_hook() -> None:
    global _fork_hook_registered

    def forget_parent_pool() -> None:
        global _pool, _pool_lock
        _pool = None
        _pool_lock = threading.Lock()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=forget_parent_pool)
    _fork_hook_registered = True


def for_each_in_parallel(function: Callable[[Item], None], items: Sequence[Item]) -> None:
    """Call ``function`` on every item, shared between the decode pool and the calling thread.

    Threads take the next item from a common counter, so the caller never
    waits for a pool thread that a busy machine has not scheduled yet: it only
    waits for items already being worked on. The first error is re-raised.
    """
    count = len(items)
    workers = min(count, decode_workers())
    if workers <= 1:
        for item in items:
            function(item)
        return
    next_index = itertools.count()
    finished = threading.Condition()
    state: dict[str, Any] = {"done": 0, "error": None}

    def drain() -> None:
        while (index := next(next_index)) < count:
            try:
                function(items[index])
            except BaseException as error:  # handed to the caller below
                with finished:
                    state["error"] = state["error"] or error
            finally:
                with finished:
                    state["done"] += 1
                    if state["done"] == count:
                        finished.notify_all()

    pool = decode_pool()
    for _ in range(workers - 1):
        pool.submit(drain)
    drain()
    with finished:
        finished.wait_for(lambda: state["done"] == count)
    if state["error"] is not None:
        raise state["error"]


def chunk_grid(length: int, tile: int, target: int = CHUNK_TARGET_PX) -> tuple[int, ...]:
    """Chunk sizes along one axis: whole multiples of ``tile`` near ``target`` px."""
    per_chunk = max(1, round(target / tile)) * tile
    sizes = [per_chunk] * (length // per_chunk)
    if length % per_chunk:
        sizes.append(length % per_chunk)
    return tuple(sizes) or (0,)


def to_rgb(pixels: np.ndarray) -> np.ndarray:
    """[h, w] or [h, w, 1|3|4] uint8 -> [h, w, 3] uint8; alpha is composited over white."""
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    samples = pixels.shape[-1]
    if samples == 3:
        return pixels
    if samples == 1:
        return np.repeat(pixels, 3, axis=-1)
    if samples == 4:
        alpha = pixels[..., 3:4].astype(np.uint16)
        rgb = pixels[..., :3].astype(np.uint16)
        return ((rgb * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)
    return pixels[..., :3]


class PositionalFile:
    """Thread-safe reads at file offsets: ``os.pread`` where the OS has it, else seek + read."""

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()
        self._pread = getattr(os, "pread", None)

    def read(self, offset: int, count: int) -> bytes:
        """``count`` bytes from ``offset`` (fewer at the end of the file)."""
        if self._handle.closed:
            raise closed_error(self.path)
        if self._pread is not None:
            data: bytes = self._pread(self._handle.fileno(), count, offset)
            return data
        with self._lock:
            self._handle.seek(offset)
            return self._handle.read(count)

    def size(self) -> int:
        """Length of the file in bytes."""
        return os.fstat(self._handle.fileno()).st_size

    def close(self) -> None:
        self._handle.close()


def closed_error(path: os.PathLike[str] | str) -> MedVLError:
    """The error for reading pixels of a slide after ``close()``."""
    name = os.path.basename(os.fspath(path))
    return MedVLError(f"{name}: the slide was closed; open it again to read its pixels.", path)


def wrap_decode_errors(
    path: os.PathLike[str] | str, level: int
) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    """Decorator turning any decoder error in a chunk read into a CorruptFileError."""

    def decorate(read: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        def guarded(*args: Any, **kwargs: Any) -> np.ndarray:
            try:
                return read(*args, **kwargs)
            except MedVLError:
                raise
            except Exception as error:  # decoders raise many unrelated types
                name = os.path.basename(os.fspath(path))
                detail = error_reason(error)
                detail = detail or type(error).__name__
                raise CorruptFileError(
                    f"{name}: pixel data of level {level} could not be decoded ({detail}); "
                    "the file is damaged or truncated, re-copy or re-export it.",
                    path,
                ) from error

        return guarded

    return decorate


class _DaskAdapter:
    """Presents a PixelSource to ``da.from_array`` (which slices it chunk by chunk)."""

    def __init__(self, source: PixelSource) -> None:
        self.source = source
        self.shape = tuple(source.shape)
        self.dtype = np.dtype(np.uint8)
        self.ndim = 3

    def __getitem__(self, key: Any) -> np.ndarray:
        if not isinstance(key, tuple):
            key = (key,)
        key = key + (slice(None),) * (3 - len(key))
        bounds, local = [], []
        for index, length in zip(key[:2], self.shape[:2], strict=True):
            start, stop, relative = _bounding_window(index, length)
            bounds.append((start, stop))
            local.append(relative)
        (y0, y1), (x0, x1) = bounds
        result = self.source.read(y0, y1, x0, x1)
        axis = 0
        for index in (*local, key[2]):
            result = result[(slice(None),) * axis + (index,)]
            if not isinstance(index, (int, np.integer)):
                axis += 1
        return result


def _bounding_window(index: Any, length: int) -> tuple[int, int, Any]:
    """(start, stop) of the rows/cols an index touches, and the index relative to start."""
    if isinstance(index, slice):
        start, stop, step = index.indices(length)
        if step < 0 or stop <= start:
            positions = np.arange(start, stop, step)
            if positions.size == 0:
                return 0, 0, slice(0, 0)
            low = int(positions.min())
            return low, int(positions.max()) + 1, positions - low
        return start, stop, slice(0, stop - start, step)
    if isinstance(index, (int, np.integer)):
        position = int(index) + length if index < 0 else int(index)
        return position, position + 1, 0
    positions = np.asarray(index)
    if positions.dtype == bool:
        positions = np.flatnonzero(positions)
    positions = np.where(positions < 0, positions + length, positions)
    if positions.size == 0:
        return 0, 0, positions
    low = int(positions.min())
    return low, int(positions.max()) + 1, positions - low


def as_dask_level(source: PixelSource, tile_hw: Sequence[int], name: str) -> da.Array:
    """Wrap ``source`` as a lazy dask array [H, W, 3] whose chunks hold whole native tiles."""
    height, width, _ = source.shape
    chunks = (
        chunk_grid(height, int(tile_hw[0])),
        chunk_grid(width, int(tile_hw[1])),
        (3,),
    )
    level: da.Array = da.from_array(
        _DaskAdapter(source),
        chunks=chunks,
        name=name,
        lock=False,
        asarray=False,
        meta=np.empty((0, 0, 3), dtype=np.uint8),
    )
    return level


class LazyImages(Mapping[str, np.ndarray]):
    """Associated images (label, macro, thumbnail) decoded on first access, [h, w, 3] uint8."""

    def __init__(self, path: Path, loaders: Mapping[str, Callable[[], Any]]) -> None:
        self.path = path
        self._loaders = dict(loaders)
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._cache:
            try:
                image = np.asarray(self._loaders[key]())
            except KeyError:
                raise
            except Exception as error:
                raise CorruptFileError(
                    f"{self.path.name}: the associated image {key!r} could not be decoded "
                    f"({error}); the file is damaged, re-copy or re-export it.",
                    self.path,
                ) from error
            self._cache[key] = to_rgb(image)
        return self._cache[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)
