"""Patch feature stores: batched, resumable extraction from a slide, and TRIDENT/CLAM imports.

Store layout (a zarr group): ``features`` [N, D] float32, ``coords`` [N, 2] int64 (x, y)
level-0 px of each patch's top-left corner; attributes ``patch_size_level0``, ``patch_size``,
``target_mpp``, ``encoder``, ``slide`` (the slide's file name, never its folder),
``slide_fingerprint`` (its content fingerprint, see :mod:`medvl_engine._fingerprint`),
``slide_mpp`` ((x, y) um per level-0 px or None), ``slide_dimensions`` ((width, height) level-0
px), ``n_total`` and ``n_done`` (rows written, in order; a store with n_done < n_total is
resumed by running the extraction again). A store imported from a TRIDENT/CLAM file also has
``imported_from`` (that file's name) and ``source_fingerprint`` (its content fingerprint).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from medvl_engine._feature_io import (
    STORE_FORMAT,
    StoreMismatch,
    create_store,
    open_store_group,
    read_h5_features,
    read_store,
)
from medvl_engine._fingerprint import short_fingerprint, slide_fingerprint
from medvl_engine.errors import CancelledError, DataError

__all__ = [
    "FeatureStore",
    "PatchGridLike",
    "check_store_matches_slide",
    "extract_features",
    "import_h5_features",
    "open_features_for_slide",
    "read_patches",
    "slide_features",
    "slide_identity",
    "store_file_name",
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


@dataclass
class FeatureStore:
    """Patch features of one slide held in memory for fast re-prompting.

    ``features`` is float32 [N, D], C-contiguous, rows L2-normalised (so a prompt's cosine map
    is one mat-vec); ``coords`` int64 [N, 2] (x, y) level-0 px top-left; ``mpp`` the slide's
    level-0 (x, y) um/px or None; ``slide`` the slide's file name and ``slide_fingerprint`` its
    content fingerprint (None for stores that did not record one); ``imported_from`` the name
    of the TRIDENT/CLAM file the features came from, if any.
    """

    features: np.ndarray
    coords: np.ndarray
    patch_size_level0: int
    patch_size: int
    target_mpp: float | None = None
    encoder: str = ""
    slide: str = ""
    mpp: tuple[float, float] | None = None
    slide_dimensions: tuple[int, int] | None = None
    path: Path | None = None
    stride: int | None = None
    slide_fingerprint: str | None = None
    imported_from: str | None = None

    def __post_init__(self) -> None:
        features = np.ascontiguousarray(self.features, dtype=np.float32)
        norms = np.linalg.norm(features, axis=1, keepdims=True)
        if not np.allclose(norms, 1.0, atol=1e-3):
            features = features / np.maximum(norms, 1e-12)
        self.features = features
        self.coords = np.ascontiguousarray(self.coords, dtype=np.int64).reshape(-1, 2)
        if len(self.coords) != len(self.features):
            raise DataError(
                f"Feature store {self.path or self.slide}: {len(self.features)} feature rows but "
                f"{len(self.coords)} coordinates; re-extract the features."
            )
        self._torch = torch.from_numpy(self.features)

    @classmethod
    def open(cls, path: str | Path) -> FeatureStore:
        """Load a complete zarr feature store (features read once into float32 memory)."""
        data = read_store(Path(path))
        return cls(**data, path=Path(path))

    @property
    def n_patches(self) -> int:
        return int(self.features.shape[0])

    @property
    def embed_dim(self) -> int:
        return int(self.features.shape[1])

    @property
    def torch_features(self) -> torch.Tensor:
        """The features as a torch tensor sharing memory with ``features`` [N, D]."""
        return self._torch

    @property
    def stride_level0(self) -> int:
        """Grid step in level-0 px: as recorded, else from the coordinates (patch size if N < 2)."""
        if self.stride:
            return int(self.stride)
        steps = []
        for axis in (0, 1):
            values = np.unique(self.coords[:, axis])
            if len(values) > 1:
                steps.append(int(np.gcd.reduce(np.diff(values))))
        return min(steps) if steps else int(self.patch_size_level0)


def extract_features(
    slide: Any,
    encoder: Any,
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
    """
    out_path = Path(out_path)
    slide_name, fingerprint = slide_identity(slide)
    coords = np.ascontiguousarray(grid.coords, dtype=np.int64).reshape(-1, 2)
    total = len(coords)
    attrs = {
        "format": STORE_FORMAT,
        "patch_size_level0": int(grid.patch_size_level0),
        "patch_size": int(grid.patch_size),
        "level": int(grid.level),
        "read_size": int(getattr(grid, "read_size", grid.patch_size)),
        "stride_level0": int(getattr(grid, "stride_level0", 0)) or None,
        "target_mpp": None if grid.target_mpp is None else float(grid.target_mpp),
        "encoder": str(encoder.name),
        "slide": slide_name,
        "slide_fingerprint": fingerprint,
        "slide_mpp": None if slide.mpp is None else [float(v) for v in slide.mpp],
        "slide_dimensions": [int(v) for v in slide.dimensions],
        "embed_dim": int(encoder.embed_dim),
        "n_total": total,
    }
    try:
        group = open_store_group(out_path, coords, attrs)
    except StoreMismatch:
        if not replace_mismatch:
            raise
        group = None  # a cached store of an older format or another slide: built again
    if group is None:
        group = create_store(out_path, coords, attrs, chunk_rows=batch_size)
    features = group["features"]
    done = int(group.attrs.get("n_done", 0))
    if progress is not None:
        progress(done, total)
    is_cancelled = _cancel_check(cancel)
    autocast = _autocast(encoder.device)

    read_size = int(getattr(grid, "read_size", grid.patch_size))
    patch_bytes = 3 * max(read_size, int(grid.patch_size)) ** 2

    def read_block(start: int, stop: int) -> np.ndarray:
        patches = read_patches(slide, coords[start:stop], grid.level, read_size)
        return _resize(patches, int(grid.patch_size))

    blocks = iter(_read_blocks(done, total, batch_size, patch_bytes))
    threads_before = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(max(1, int(torch_threads)))

    def write_batch(start: int, end: int, rows: np.ndarray) -> None:
        features[start:end] = rows
        group.attrs["n_done"] = end  # after the rows, so n_done never counts unwritten rows

    with (
        ThreadPoolExecutor(
            max_workers=max(1, num_workers), thread_name_prefix="medvl-read"
        ) as pool,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="medvl-write") as writer,
    ):
        pending: deque[tuple[int, int, Future]] = deque()
        writes: deque[Future] = deque()  # at most one batch written behind the encoder

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


def import_h5_features(
    h5_path: str | Path,
    out_path: str | Path | None = None,
    *,
    slide_mpp: tuple[float, float] | None = None,
    encoder: str = "",
    patch_size_level0: int | None = None,
) -> FeatureStore:
    """Load a TRIDENT/CLAM ``.h5`` (features [N, D], coords [N, 2], patch_size_level0) as a store.

    Nothing is re-encoded. With ``out_path`` the features are also written as a zarr store
    that records the file it came from (``imported_from``, ``source_fingerprint``); it records
    no slide fingerprint, since the file does not say which slide file it was made from.
    ``patch_size_level0`` is used when the file's attributes do not give the patch size.
    """
    from medvl_engine._fingerprint import file_fingerprint

    h5_path = Path(h5_path)
    data = read_h5_features(h5_path, patch_size_level0=patch_size_level0)
    data["mpp"] = slide_mpp if slide_mpp is not None else data.get("mpp")
    data["encoder"] = encoder or data.get("encoder", "")
    store = FeatureStore(**data, imported_from=h5_path.name)
    if out_path is not None:
        write_imported_store(Path(out_path), store, source_fingerprint=file_fingerprint(h5_path))
    return store


def write_imported_store(out_path: Path, store: FeatureStore, *, source_fingerprint: str) -> None:
    """Write ``store`` (features from a TRIDENT/CLAM file) as a complete zarr store at out_path."""
    attrs = {
        "format": STORE_FORMAT,
        "patch_size_level0": store.patch_size_level0,
        "patch_size": store.patch_size,
        "level": 0,
        "target_mpp": store.target_mpp,
        "encoder": store.encoder,
        "slide": store.slide,
        "slide_fingerprint": store.slide_fingerprint,
        "slide_mpp": None if store.mpp is None else list(store.mpp),
        "slide_dimensions": None
        if store.slide_dimensions is None
        else list(store.slide_dimensions),
        "embed_dim": store.embed_dim,
        "n_total": store.n_patches,
        "imported_from": store.imported_from,
        "source_fingerprint": source_fingerprint,
    }
    group = create_store(out_path, store.coords, attrs, chunk_rows=4096)
    group["features"][:] = store.features
    group.attrs["n_done"] = store.n_patches  # last: a killed import reads as incomplete
    store.path = out_path


_FINGERPRINTS: dict[tuple, str] = {}


def slide_identity(slide: Any) -> tuple[str, str | None]:
    """(file name, content fingerprint) of an open slide; ("", None) for one without a file.

    Fingerprints are remembered per (path, size, modification time, inode), so asking again
    for an unchanged file costs one stat.
    """
    raw = getattr(slide, "path", None)
    if raw is None or str(raw) == "":
        return "", None
    path = Path(raw)
    try:
        info = path.stat()
    except OSError:
        return path.name, None
    key = (str(path), info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)
    if key not in _FINGERPRINTS:
        try:
            _FINGERPRINTS[key] = slide_fingerprint(path)
        except OSError as error:
            raise DataError(
                f"{path.name} could not be read to check which slide it is "
                f"({error.strerror or 'read error'}); check the file is readable.",
                path,
            ) from error
    return path.name, _FINGERPRINTS[key]


def store_file_name(slide: Any) -> str:
    """``<slide stem>-<12 hex digits of its fingerprint>.zarr``: same-named slides never share."""
    name, fingerprint = slide_identity(slide)
    stem = Path(name).stem or "slide"
    return f"{stem}-{short_fingerprint(fingerprint)}.zarr" if fingerprint else f"{stem}.zarr"


def check_store_matches_slide(store: FeatureStore, slide: Any) -> None:
    """Raise DataError unless ``store`` was made from ``slide`` (same content fingerprint).

    A store imported from a TRIDENT/CLAM file without a slide fingerprint is accepted when its
    patches lie on the slide; a store that records no fingerprint at all (written by an older
    medvl) is refused, since nothing says which slide it belongs to.
    """
    slide_name, fingerprint = slide_identity(slide)
    label = store.path.name if store.path is not None else "The feature store"
    if store.slide_fingerprint is None and not store.imported_from:
        raise DataError(
            f"{label} does not record which slide it was made from (an older medvl wrote it); "
            f"extract the features of {slide_name or 'the slide'} again with `medvl features`.",
            store.path,
        )
    if store.slide_fingerprint is not None and store.slide_fingerprint != fingerprint:
        made_from = store.slide or "an unnamed slide"
        same_name = " (another file with the same name)" if made_from == slide_name else ""
        raise DataError(
            f"{label} was made from {made_from}{same_name}, not from {slide_name}: their "
            f"contents differ; pass the store extracted from {slide_name}, or leave out "
            "--features to extract it.",
            store.path,
        )
    _check_patches_on_slide(store, slide, label, slide_name)


def _check_patches_on_slide(store: FeatureStore, slide: Any, label: str, slide_name: str) -> None:
    """Refuse a store whose patches lie outside the slide (features of a larger slide)."""
    if store.n_patches == 0:
        return
    width, height = (int(v) for v in slide.dimensions)
    right = int(store.coords[:, 0].max())
    bottom = int(store.coords[:, 1].max())
    if store.coords.min() < 0 or right >= width or bottom >= height:
        raise DataError(
            f"{label} has patches up to ({right}, {bottom}) level-0 px, outside {slide_name} "
            f"({width} x {height} px), so it belongs to another slide; pass the features "
            f"made from {slide_name}.",
            store.path,
        )


def open_features_for_slide(
    path: str | Path,
    slide: Any,
    *,
    coords_path: str | Path | None = None,
    patch_size_level0: int | None = None,
) -> FeatureStore:
    """The features at ``path`` for ``slide``, checked to belong to it.

    ``path`` is a medvl store (a ``.zarr`` folder), a TRIDENT/CLAM ``.h5`` file or a CLAM
    ``.pt`` file (coordinates from ``coords_path``, else ``<stem>.h5`` beside it or in a
    sibling ``h5_files`` folder). A ``.h5``/``.pt`` file is imported once into the cache next
    to the slide's other stores, keyed by the slide's and the file's fingerprints, and read
    from there afterwards. See :mod:`medvl_engine._feature_sources`.
    """
    from medvl_engine._feature_sources import open_feature_source

    return open_feature_source(
        Path(path), slide, coords_path=coords_path, patch_size_level0=patch_size_level0
    )


def store_path_for(slide: Any, encoder: Any, grid: PatchGridLike) -> Path:
    """Cache location of the store for (slide content, encoder, patch grid): MEDVL_CACHE/features.

    Keyed by the slide's content fingerprint, not its path: two different slides with the same
    name never share a store, and a moved or copied slide keeps its cached features.
    """
    import hashlib

    from medvl_engine._cache import cache_dir

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
    slide: Any,
    encoder: Any,
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

    grid = patch_grid(
        slide,
        patch_size=int(patch_size or encoder.patch_size),
        target_mpp=float(target_mpp or encoder.target_mpp),
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


def read_patches(slide: Any, coords: np.ndarray, level: int, patch_size: int) -> np.ndarray:
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


def _resize(patches: np.ndarray, size: int) -> np.ndarray:
    """uint8 [B, h, w, 3] -> [B, size, size, 3]: box filter when shrinking, bicubic when growing."""
    if patches.shape[1:3] == (size, size):
        return patches
    from PIL import Image

    shrink = patches.shape[1] > size
    resample = Image.Resampling.BOX if shrink else Image.Resampling.BICUBIC
    return np.stack(
        [np.asarray(Image.fromarray(p).resize((size, size), resample)) for p in patches]
    )


def _cancel_check(cancel: threading.Event | Callable[[], bool] | None) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if isinstance(cancel, threading.Event):
        return cancel.is_set
    return lambda: bool(cancel())


def _autocast(device: torch.device):
    if device.type != "cuda":
        return nullcontext()
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)
