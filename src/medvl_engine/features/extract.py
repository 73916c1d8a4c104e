"""Batched, resumable extraction of patch features from a slide into a zarr feature store.

Patches of a grid are read in background threads, encoded in batches and written one chunk per
batch; ``n_done`` counts the rows written, so a stopped run resumes where it ended. See
:mod:`medvl_engine.features.store` for the store layout.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from medvl_engine.common.write_errors import reporting_write_errors
from medvl_engine.errors import CancelledError
from medvl_engine.features.identity import slide_identity
from medvl_engine.features.store import (
    FeatureStore,
    StoreMismatch,
    create_store,
    extraction_attributes,
    features_array,
    open_store_group,
    record_rows_written,
    rows_written,
)

if TYPE_CHECKING:
    from medvl_engine.encoders import PatchTextEncoder
    from medvl_engine.tiling import SlideLike

__all__ = [
    "PatchGridLike",
    "as_cancel_check",
    "extract_features",
    "grid_patches",
    "read_patches",
    "resize_patches",
    "slide_features",
    "store_path_for",
]

ProgressCallback = Callable[[int, int], None]
_MAX_BOX_OVERREAD = 2.5  # read a batch's bounding box at once if it is at most this x its patches
_READ_BLOCK_PATCHES = 256
_READ_BLOCK_BYTES = 64 * 2**20


class PatchGridLike(Protocol):
    """What extraction needs from a patch grid (``medvl_engine.tiling.PatchGrid`` has it)."""

    coords: np.ndarray  # int64 [N, 2], (x, y) level-0 px, top-left
    patch_size: int  # px handed to the encoder (at target_mpp)
    patch_size_level0: int
    level: int
    target_mpp: float | None


def extract_features(
    slide: SlideLike,
    encoder: PatchTextEncoder,
    grid: PatchGridLike,
    out_path: str | Path,
    batch_size: int = 64,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | Callable[[], bool] | None = None,
    num_workers: int = 1,
    prefetch: int = 4,
    torch_threads: int | None = None,
    replace_mismatch: bool = False,
) -> FeatureStore:
    """Encode every patch of ``grid`` into a zarr store at ``out_path`` and return it loaded.

    Patches (``grid.read_size`` px at ``grid.level``, resized to ``grid.patch_size`` when they
    differ) are read and decoded by ``num_workers`` background threads, at least ``prefetch``
    batches and two reads ahead of the encoder; reads grow from one batch to a few hundred
    patches so tiles shared by neighbouring batches are decoded once. Each finished batch is
    written as one chunk and counted in ``n_done``, so a run stopped by ``cancel`` (raising
    CancelledError), a crash or a kill continues from there when called again with the same
    ``out_path``. ``progress(done, total)`` is called after every batch. On CUDA the encoder
    runs under bf16 (or fp16) autocast. ``torch_threads`` sets torch's intra-op threads for
    the run (restored afterwards; None keeps them): on a CPU-bound run with a cheap encoder,
    one fewer than the cores leaves a core to the reader.

    A store already at ``out_path`` is resumed only when it was made from the same slide
    (content fingerprint), encoder and grid; otherwise DataError, or, with
    ``replace_mismatch`` (for stores in the cache, which can be rebuilt), it is replaced.

    The grid is checked before anything is read or written (whole, sane patch sizes, at most
    MEDVL_MAX_PATCHES patches, a batch within the decode limit: see
    :func:`medvl_engine.tiling.check_grid_budget`). A write the machine refuses (disk full,
    read-only folder, permission denied) raises StorageError naming the store; the store is
    then left incomplete (``n_done`` counts only rows written, never past a batch that failed),
    so the same call resumes it once the disk takes writes again.
    """
    from medvl_engine.tiling import check_grid_budget

    check_grid_budget(grid, batch_size, slide)  # before anything is read, queued or written
    out_path = Path(out_path)
    slide_name, fingerprint = slide_identity(slide)
    coords = np.ascontiguousarray(grid.coords, dtype=np.int64).reshape(-1, 2)
    total = len(coords)
    attrs = extraction_attributes(grid, encoder, slide, (slide_name, fingerprint))
    with reporting_write_errors("feature store", out_path):
        try:
            group = open_store_group(out_path, coords, attrs)
        except StoreMismatch:
            if not replace_mismatch:
                raise
            group = None  # a cached store of an older format or another slide: built again
        if group is None:
            group = create_store(out_path, coords, attrs, chunk_rows=batch_size)
    features = features_array(group, out_path)
    done = rows_written(group, out_path)
    if progress is not None:
        progress(done, total)
    is_cancelled = as_cancel_check(cancel)
    autocast = _autocast(encoder.device)

    read_size = int(getattr(grid, "read_size", grid.patch_size))
    patch_bytes = 3 * max(read_size, int(grid.patch_size)) ** 2

    def read_block(start: int, stop: int) -> np.ndarray:
        return grid_patches(slide, grid, coords[start:stop])

    blocks = iter(_read_blocks(done, total, batch_size, patch_bytes))
    threads_before = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(max(1, int(torch_threads)))

    written = [done]  # rows [0, written[0]) are in the store; the writer thread alone moves it

    def write_batch(start: int, end: int, rows: np.ndarray) -> None:
        if start != written[0]:
            return  # an earlier batch failed to write: n_done must never skip its rows
        with reporting_write_errors("feature store", out_path):
            features[start:end] = rows
            record_rows_written(group, end)  # after the rows: never counts unwritten rows
        written[0] = end

    with (
        ThreadPoolExecutor(
            max_workers=max(1, num_workers), thread_name_prefix="medvl-read"
        ) as pool,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="medvl-write") as writer,
    ):
        pending: deque[tuple[int, int, Future[Any]]] = deque()
        writes: deque[Future[Any]] = deque()  # at most one batch written behind the encoder

        def top_up() -> None:
            queued = sum(stop - start for start, stop, _ in pending)
            while len(pending) < 2 or queued < max(1, prefetch) * batch_size:
                block = next(blocks, None)
                if block is None:
                    return
                pending.append((*block, pool.submit(read_block, *block)))
                queued += block[1] - block[0]

        top_up()
        try:
            while pending:
                block_start, block_stop, future = pending.popleft()
                block_patches = future.result()
                top_up()
                for start in range(block_start, block_stop, batch_size):
                    if is_cancelled():
                        raise CancelledError(
                            f"Feature extraction for {slide_name or 'the slide'} "
                            f"was cancelled after {done} of {total} patches; run it again with "
                            f"the same output {out_path} to resume."
                        )
                    end = min(start + batch_size, block_stop)
                    patches = block_patches[start - block_start : end - block_start]
                    with autocast:
                        embeddings = encoder.encode_patches(patches, normalize=True)
                    writes.append(
                        writer.submit(write_batch, start, end, embeddings.float().numpy())
                    )
                    while len(writes) > 1:
                        writes.popleft().result()  # a failed write stops the run here
                    done = end
                    if progress is not None:
                        progress(done, total)
            while writes:
                writes.popleft().result()
        finally:  # stopped early (cancel, a raising progress callback): drop queued reads
            for _, _, future in pending:
                future.cancel()
            wait(writes)  # batches already encoded still reach the store, so a rerun resumes
            torch.set_num_threads(threads_before)
    return FeatureStore.open(out_path)


def store_path_for(slide: SlideLike, encoder: PatchTextEncoder, grid: PatchGridLike) -> Path:
    """Cache location of the store for (slide content, encoder, patch grid): MEDVL_CACHE/features.

    Keyed by the slide's content fingerprint, not its path: two different slides with the same
    name never share a store, and a moved or copied slide keeps its cached features.
    """
    import hashlib

    from medvl_engine.common.cache import cache_dir

    name, fingerprint = slide_identity(slide)
    coords = np.ascontiguousarray(grid.coords, dtype=np.int64)
    key = "|".join(
        [
            fingerprint or str(getattr(slide, "path", "")),
            str(encoder.name),
            str(grid.patch_size),
            str(grid.patch_size_level0),
            str(grid.level),
            hashlib.sha1(coords.tobytes()).hexdigest(),
        ]
    )
    digest = hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return cache_dir() / "features" / f"{Path(name).stem or 'slide'}-{digest}.zarr"


def slide_features(
    slide: SlideLike,
    encoder: PatchTextEncoder,
    out_path: str | Path | None = None,
    *,
    patch_size: int | None = None,
    target_mpp: float | None = None,
    min_tissue: float = 0.25,
    stride: int | None = None,
    batch_size: int = 64,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | Callable[[], bool] | None = None,
) -> FeatureStore:
    """Tissue patch grid at the encoder's patch size and mpp (unless given), then extraction.

    Without ``out_path`` the store goes to the cache (:func:`store_path_for`), so a second call
    for the same slide and encoder loads it instead of encoding again; a cached store of an
    older format is rebuilt.
    """
    from medvl_engine.tiling import patch_grid

    grid = patch_grid(  # checks sizes and counts the patches before making any
        slide,
        patch_size=encoder.patch_size if patch_size is None else patch_size,
        target_mpp=encoder.target_mpp if target_mpp is None else target_mpp,
        min_tissue=min_tissue,
        stride=stride,
    )
    in_cache = out_path is None
    if out_path is None:
        out_path = store_path_for(slide, encoder, grid)
    return extract_features(
        slide,
        encoder,
        grid,
        out_path,
        batch_size=batch_size,
        progress=progress,
        cancel=cancel,
        replace_mismatch=in_cache,
    )


def read_patches(slide: SlideLike, coords: np.ndarray, level: int, patch_size: int) -> np.ndarray:
    """Pixels of patches uint8 [B, p, p, 3]; ``coords`` [B, 2] (x, y) level-0 px top-left.

    A compact batch (bounding box at most 2.5 x the patches' area) is read as one region and
    sliced; otherwise patches on one row that touch or overlap are read together. Either way
    shared tiles are decoded once per region and the pixels equal those of one ``read_region``
    per patch (whose level-``level`` top-left is floor(x / downsample), as read_region has it).
    """
    width0, height0 = slide.level_dimensions[0]
    level_width, level_height = slide.level_dimensions[level]
    down_x, down_y = width0 / max(level_width, 1), height0 / max(level_height, 1)
    out = np.empty((len(coords), patch_size, patch_size, 3), dtype=np.uint8)
    if len(coords) == 0:
        return out
    left_px = np.floor(coords[:, 0] / down_x).astype(np.int64)
    top_px = np.floor(coords[:, 1] / down_y).astype(np.int64)
    box_w = int(left_px.max() - left_px.min()) + patch_size
    box_h = int(top_px.max() - top_px.min()) + patch_size
    if box_w * box_h <= _MAX_BOX_OVERREAD * len(coords) * patch_size**2:
        x0, y0 = int(left_px.min()), int(top_px.min())
        location = (math.ceil(x0 * down_x), math.ceil(y0 * down_y))
        region = slide.read_region(location, level, (box_w, box_h))
        for index in range(len(coords)):
            dx, dy = int(left_px[index] - x0), int(top_px[index] - y0)
            out[index] = region[dy : dy + patch_size, dx : dx + patch_size]
        return out
    order = np.lexsort((coords[:, 0], coords[:, 1]))
    run: list[int] = []

    def flush() -> None:
        first, last = coords[run[0]], coords[run[-1]]
        left = math.floor(first[0] / down_x)
        width = math.floor(last[0] / down_x) - left + patch_size
        region = slide.read_region((int(first[0]), int(first[1])), level, (width, patch_size))
        for index in run:
            offset = math.floor(coords[index, 0] / down_x) - left
            out[index] = region[:, offset : offset + patch_size]

    for index in order:
        if run:
            previous = coords[run[-1]]
            same_row = math.floor(coords[index, 1] / down_y) == math.floor(previous[1] / down_y)
            gap = math.floor(coords[index, 0] / down_x) - math.floor(previous[0] / down_x)
            if not (same_row and 0 <= gap <= patch_size):
                flush()
                run = []
        run.append(int(index))
    if run:
        flush()
    return out


def _read_blocks(
    first: int, total: int, batch_size: int, patch_bytes: int
) -> Iterator[tuple[int, int]]:
    """[start, stop) patch ranges read in one call each: one batch first, then doubling.

    Larger reads decode the tiles shared by neighbouring batches once; the first read is
    one batch so the encoder starts at once. A read holds at most _READ_BLOCK_PATCHES patches
    and _READ_BLOCK_BYTES of pixels (but always a whole batch), and ends on a batch boundary.
    """
    limit = min(_READ_BLOCK_PATCHES, _READ_BLOCK_BYTES // max(patch_bytes, 1))
    largest = max(1, limit // batch_size) * batch_size
    size, start = batch_size, first
    while start < total:
        stop = min(start + size, total)
        yield start, stop
        start, size = stop, min(2 * size, largest)


def grid_patches(slide: SlideLike, grid: PatchGridLike, coords: np.ndarray) -> np.ndarray:
    """Pixels of patches of ``grid`` as its encoder gets them, uint8 [B, p, p, 3] (p =
    ``grid.patch_size``): ``coords`` [B, 2] (x, y) level-0 px top-left, read at ``grid.level``
    (``grid.read_size`` px when the grid has one) and resized to p. The extraction and the
    viewer's visible-first patches both read through here, so their features agree."""
    read_size = int(getattr(grid, "read_size", grid.patch_size))
    patches = read_patches(slide, np.asarray(coords).reshape(-1, 2), grid.level, read_size)
    return resize_patches(patches, int(grid.patch_size))


def resize_patches(patches: np.ndarray, size: int) -> np.ndarray:
    """uint8 [B, h, w, 3] -> [B, size, size, 3]: box filter when shrinking, bicubic when growing."""
    if patches.shape[1:3] == (size, size):
        return patches
    from PIL import Image

    shrink = patches.shape[1] > size
    resample = Image.Resampling.BOX if shrink else Image.Resampling.BICUBIC
    return np.stack(
        [np.asarray(Image.fromarray(p).resize((size, size), resample)) for p in patches]
    )


def as_cancel_check(cancel: threading.Event | Callable[[], bool] | None) -> Callable[[], bool]:
    """``cancel`` (an Event, a callable or None) as a callable: True once the work should stop."""
    if cancel is None:
        return lambda: False
    if isinstance(cancel, threading.Event):
        return cancel.is_set
    return lambda: bool(cancel())


def _autocast(device: torch.device) -> AbstractContextManager[object]:
    if device.type != "cuda":
        return nullcontext()
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)
