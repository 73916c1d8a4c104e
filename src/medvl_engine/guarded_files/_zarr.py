"""Zarr feature stores: every entry a regular file or folder inside the store, metadata capped,
declared array sizes and missing chunks checked before reading."""

from __future__ import annotations

import itertools
import math
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError, UnsupportedFormatError
from medvl_engine.guarded_files._common import (
    MAX_METADATA_BYTES,
    MAX_STORE_ENTRIES,
    METADATA_NAMES,
    dtype_words,
    name_of,
    reason,
    too_big_error,
)
from medvl_engine.io.limits import check_array_bytes, format_bytes, max_array_bytes
from medvl_engine.io.safe_open import describe_file_type

if TYPE_CHECKING:
    import zarr

__all__ = ["check_zarr_array", "check_zarr_tree", "open_zarr_group"]


def check_zarr_tree(path: str | os.PathLike[str], what: str = "feature store") -> Path:
    """``path`` resolved, if it is a folder whose every entry is a regular file or folder inside
    it, metadata files at most :data:`MAX_METADATA_BYTES` and at most
    :data:`MAX_STORE_ENTRIES` entries.

    A symbolic link is allowed only to a regular file or folder inside the store; a named pipe,
    device or socket anywhere in it is refused without being opened.
    """
    given = Path(path)
    try:
        root = given.resolve(strict=True)
        mode = os.stat(root).st_mode
    except FileNotFoundError:
        raise DataError(f"{name_of(given)}: no such {what}; check the path.", given) from None
    except (OSError, RuntimeError) as error:
        raise DataError(
            f"{name_of(given)}: the {what} cannot be inspected ({reason(error)}); check the path "
            "and its permissions.",
            given,
        ) from None
    if not stat.S_ISDIR(mode):
        kind = describe_file_type(mode) if not stat.S_ISREG(mode) else "a file"
        raise UnsupportedFormatError(
            f"{name_of(given)} is {kind}, not a {what} (a zarr folder); give the folder written "
            "by `medvl features`.",
            given,
        )
    pending, seen = [root], 0
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as error:
            raise DataError(
                f"{name_of(given)}: a folder of the {what} cannot be listed ({reason(error)}); "
                "check its permissions.",
                given,
            ) from None
        for entry in entries:
            seen += 1
            if seen > MAX_STORE_ENTRIES:
                raise CorruptFileError(
                    f"{name_of(given)} holds more than {MAX_STORE_ENTRIES:,} files, more than any "
                    f"{what} medvl writes; give the store folder itself (or extract again).",
                    given,
                )
            folder_to_scan = _check_store_entry(given, root, Path(entry.path), what)
            if folder_to_scan is not None:
                pending.append(folder_to_scan)
    return root


def _check_store_entry(given: Path, root: Path, entry: Path, what: str) -> Path | None:
    """Check one entry of a store; return it when it is a real folder to scan."""
    relative = entry.relative_to(root)
    try:
        info = os.lstat(entry)
        if stat.S_ISLNK(info.st_mode):
            target = entry.resolve(strict=True)
            if target != root and root not in target.parents:
                raise UnsupportedFormatError(
                    f"{name_of(given)}: {relative} is a link to {target.name}, outside the {what}; "
                    "medvl reads only files inside it, extract the features again.",
                    given,
                )
            info = os.stat(target)
            if stat.S_ISDIR(info.st_mode):
                return None  # a folder inside the store: scanned where it really is
        elif stat.S_ISDIR(info.st_mode):
            return entry
    except (FileNotFoundError, RuntimeError):
        raise CorruptFileError(
            f"{name_of(given)}: {relative} is a broken link or a loop of links; extract the "
            "features again.",
            given,
        ) from None
    except OSError as error:
        raise DataError(
            f"{name_of(given)}: {relative} cannot be inspected ({reason(error)}); check its "
            "permissions.",
            given,
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise UnsupportedFormatError(
            f"{name_of(given)}: {relative} is {describe_file_type(info.st_mode)}, not a regular "
            f"file, so the {what} is not read; extract the features again.",
            given,
        )
    if entry.name in METADATA_NAMES and info.st_size > MAX_METADATA_BYTES:
        raise CorruptFileError(
            f"{name_of(given)}: its metadata file {relative} is {format_bytes(info.st_size)}, more "
            f"than the {format_bytes(MAX_METADATA_BYTES)} a {what} writes; extract the features "
            "again.",
            given,
        )
    if info.st_size > max_array_bytes():
        raise too_big_error(given, info.st_size, max_array_bytes())
    return None


def open_zarr_group(path: str | os.PathLike[str], what: str = "feature store") -> zarr.Group:
    """The zarr group at ``path`` opened read-only, after :func:`check_zarr_tree`."""
    import zarr

    root = check_zarr_tree(path, what)
    try:
        return zarr.open_group(str(root), mode="r")
    except Exception as error:  # zarr raises many types for a folder that is not a group
        raise CorruptFileError(
            f"{name_of(path)} is not a readable zarr {what} ({reason(error)}); extract the "
            "features again.",
            path,
        ) from None


def check_zarr_array(
    array: Any,
    root: str | os.PathLike[str],
    *,
    out_itemsize: int = 4,
    kinds: str = "biuf",
    single_rows_may_be_unwritten: bool = False,
    require_all_chunks: bool = True,
) -> None:
    """Refuse a store array that is not numeric, would take more than the array limit (shape
    and chunk shape), or misses chunk files (which zarr reads back as its fill value).

    ``root`` is the store folder the array's group was opened at. With
    ``single_rows_may_be_unwritten`` a missing chunk of one row is allowed: zarr does not
    write a chunk equal to its fill value, which one (0, 0) coordinate pair is. Without
    ``require_all_chunks`` (labels, where a chunk of zeros is real data zarr leaves unwritten)
    chunks are not counted.
    """
    label = str(getattr(array, "path", "") or getattr(array, "name", "array")).strip("/")
    try:
        dtype = np.dtype(array.dtype)
        shape = tuple(int(v) for v in array.shape)
        chunks = tuple(int(v) for v in (getattr(array, "shards", None) or array.chunks))
        metadata = array.metadata
    except Exception as error:  # zarr raises many types for odd metadata
        raise CorruptFileError(
            f"{name_of(root)}: its {label!r} array has metadata medvl cannot read "
            f"({reason(error)}); extract the features again.",
            root,
        ) from None
    if dtype.kind not in kinds or dtype.fields is not None:
        raise UnsupportedFormatError(
            f"{name_of(root)}: its {label!r} array holds {dtype_words(dtype)}, not numbers; "
            "extract the features again.",
            root,
        )
    itemsize = max(dtype.itemsize, out_itemsize)
    check_array_bytes(root, f"its {label!r} array", shape, itemsize)
    if len(chunks) != len(shape) or any(step < 1 for step in chunks):
        raise CorruptFileError(
            f"{name_of(root)}: its {label!r} array declares chunks {chunks} for shape {shape}; "
            "extract the features again.",
            root,
        )
    check_array_bytes(root, f"each chunk of its {label!r} array", chunks, itemsize)
    if math.prod(shape) == 0 or not require_all_chunks:
        return
    grid = [-(-side // step) for side, step in zip(shape, chunks, strict=True)]
    if math.prod(grid) > MAX_STORE_ENTRIES:
        raise CorruptFileError(
            f"{name_of(root)}: its {label!r} array is split into {math.prod(grid):,} chunks, more "
            f"than the {MAX_STORE_ENTRIES:,} files a store may hold; extract the features again.",
            root,
        )
    folder = Path(root) / label
    missing = 0
    for index in itertools.product(*(range(n) for n in grid)):
        if (folder / metadata.encode_chunk_key(index)).is_file():
            continue
        rows = min(chunks[0], shape[0] - index[0] * chunks[0]) if shape else 1
        if single_rows_may_be_unwritten and rows == 1:
            continue
        missing += 1
    if missing:
        raise DataError(
            f"{name_of(root)} is incomplete: {missing} of {math.prod(grid)} chunks of its "
            f"{label!r} array are missing (they would read as zeros); extract the features "
            "again.",
            root,
        )
