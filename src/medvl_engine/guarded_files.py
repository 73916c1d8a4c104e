"""Guarded opening of the non-image files medvl reads: HDF5, zip archives (.pt, .npz), zarr stores.

Every reader of a TRIDENT/CLAM ``.h5``, a CLAM ``.pt``, a heatmap or cache ``.npz`` and a zarr
feature store goes through this module, so each gets the same guarantees as the slide readers:

- the path is a regular file (or, for a store, a folder whose every entry is a regular file or
  folder inside it): a named pipe, device, socket or ``/proc`` entry is refused without being
  opened, so nothing blocks or reads endless bytes;
- HDF5 datasets that keep their data elsewhere (external storage, ``ExternalLink``, virtual
  datasets) are refused, and soft links are followed only inside the file, a cycle refused;
- every size a file declares (dataset shapes, chunk shapes, zip members, ``.npy`` headers) is
  checked against :func:`medvl_engine.io._limits.max_array_bytes` before anything is allocated,
  so compression bombs and lazily declared datasets cost nothing;
- a dataset or store array with chunks missing (which read back as zeros) is refused as
  incomplete.

Failures are :class:`~medvl_engine.errors.MedVLError` subclasses with one sentence.
"""

from __future__ import annotations

import itertools
import math
import os
import stat
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError, MedVLError, UnsupportedFormatError
from medvl_engine.io._limits import check_array_bytes, format_bytes, max_array_bytes
from medvl_engine.io._safe_open import describe_file_type, require_regular_file

if TYPE_CHECKING:
    import h5py
    import zarr

__all__ = [
    "MAX_ARCHIVE_MEMBERS",
    "MAX_ATTRIBUTE_VALUES",
    "MAX_METADATA_BYTES",
    "MAX_STORE_ENTRIES",
    "check_h5_dataset",
    "check_zarr_array",
    "check_zarr_tree",
    "check_zip_archive",
    "h5_attribute",
    "h5_dataset",
    "load_npz",
    "open_h5",
    "open_h5_file",
    "open_zarr_group",
    "require_data_file",
]

MAX_STORE_ENTRIES = 200_000
"""Files and folders a zarr store may hold (a 200,000-patch store written in chunks of 64 rows
has about 6,300); a scan that reaches it refuses rather than passing."""

MAX_METADATA_BYTES = 4 * 2**20
"""Size of one zarr metadata file (``zarr.json``, ``.zarray``, ``.zattrs``, ...)."""

MAX_ARCHIVE_MEMBERS = 10_000
"""Members of a zip archive (.pt, .npz); a CLAM feature file has about four."""

MAX_ATTRIBUTE_VALUES = 4096
"""Values one HDF5 attribute may hold (patch sizes, mpp and names hold one or two)."""

_METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
_LINK_HOPS = 16


def _name(path: str | os.PathLike[str]) -> str:
    given = Path(path)
    return given.name or str(given)


def require_data_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` resolved, if it is a regular file with stored data; ``what`` names it in the
    advice of the error ("give the path of the <what> itself").

    Nothing is opened: a named pipe, device, socket, folder or entry of ``/proc``, ``/sys`` or
    ``/dev`` is refused from its ``stat`` alone (UnsupportedFormatError); a missing path is a
    MedVLError.
    """
    try:
        return require_regular_file(path)
    except UnsupportedFormatError as error:
        message = error.message.replace("the image file itself", f"the {what} itself")
        message = message.replace("hold no stored image", "hold no stored data")
        raise UnsupportedFormatError(message, path) from None


# ---- HDF5 ----------------------------------------------------------------------------------


def open_h5_file(path: str | os.PathLike[str], what: str = "feature file") -> h5py.File:
    """An HDF5 file opened read-only after :func:`require_data_file`; the caller closes it."""
    import h5py

    resolved = require_data_file(path, what)
    try:
        return h5py.File(resolved, "r")
    except (OSError, ValueError):
        raise CorruptFileError(
            f"{_name(path)} is not a readable HDF5 file (damaged or truncated); re-export it.",
            path,
        ) from None


@contextmanager
def open_h5(path: str | os.PathLike[str], what: str = "feature file") -> Iterator[h5py.File]:
    """:func:`open_h5_file` as a context manager; h5py errors inside it become CorruptFileError."""
    handle = open_h5_file(path, what)
    try:
        yield handle
    except MedVLError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CorruptFileError(
            f"{_name(path)}: its contents could not be read ({_reason(error)}); the file is "
            "damaged, re-export it.",
            path,
        ) from None
    finally:
        handle.close()


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text[:120] or type(error).__name__


def h5_dataset(
    handle: h5py.File, name: str, path: str | os.PathLike[str], *, required: bool = True
) -> h5py.Dataset | None:
    """The dataset ``name`` of an open file, reached only through links inside the file.

    ``name`` may be a ``/``-separated path; each part is followed by hand: a hard link is
    descended, a soft link resolved (at most 16 hops: a cycle is refused), an ExternalLink or
    user-defined link refused. The dataset itself is refused when it is virtual or keeps its
    data in external files. Returns None for a missing name unless ``required`` (then
    DataError).
    """
    with _h5_errors(path):
        obj = _follow(handle, name, path, hops=0, requested=name)
    if obj is None:
        if required:
            raise DataError(
                f"{_name(path)} has no {name.strip('/')!r} dataset; give a TRIDENT or CLAM "
                "patch-feature file.",
                path,
            )
        return None
    import h5py

    if not isinstance(obj, h5py.Dataset):
        raise UnsupportedFormatError(
            f"{_name(path)}: {name.strip('/')!r} is a group, not a dataset; give a TRIDENT or "
            "CLAM patch-feature file.",
            path,
        )
    with _h5_errors(path):
        _refuse_outside_storage(obj, name, path)
    return obj


@contextmanager
def _h5_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """h5py's errors for damaged metadata (many types) as one CorruptFileError sentence."""
    try:
        yield
    except MedVLError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CorruptFileError(
            f"{_name(path)}: its contents could not be read ({_reason(error)}); the file is "
            "damaged, re-export it.",
            path,
        ) from None


def _follow(
    handle: h5py.File, name: str, path: str | os.PathLike[str], hops: int, requested: str
) -> Any:
    """The object at ``name``, each link followed by hand (see :func:`h5_dataset`)."""
    import h5py

    if hops > _LINK_HOPS:
        raise CorruptFileError(
            f"{_name(path)}: {requested.strip('/')!r} is reached through a cycle of soft links "
            f"(or more than {_LINK_HOPS} of them); re-export the file.",
            path,
        )
    node: Any = handle
    for part in [p for p in name.split("/") if p]:
        if not isinstance(node, h5py.Group):
            return None
        link = node.get(part, getlink=True)
        if link is None:
            return None
        if isinstance(link, h5py.SoftLink):
            node = _follow(handle, _absolute(node.name, link.path), path, hops + 1, requested)
            if node is None:
                return None
        elif isinstance(link, h5py.HardLink):
            node = node[part]
        else:
            target = getattr(link, "filename", "")
            where = f" into {Path(target).name}" if target else ""
            raise UnsupportedFormatError(
                f"{_name(path)}: {part!r} is a link{where} outside this file, which medvl does "
                "not follow; export the features into the .h5 file itself.",
                path,
            )
    return node


def _absolute(group_name: str | None, target: str) -> str:
    if target.startswith("/"):
        return target
    return f"{(group_name or '/').rstrip('/')}/{target}"


def _refuse_outside_storage(dataset: h5py.Dataset, name: str, path: str | os.PathLike[str]) -> None:
    label = name.strip("/")
    if dataset.is_virtual:
        raise UnsupportedFormatError(
            f"{_name(path)}: its {label!r} dataset is virtual (its data lives in other files), "
            "which medvl does not read; export the features into the .h5 file itself.",
            path,
        )
    if dataset.id.get_create_plist().get_external_count() > 0:
        raise UnsupportedFormatError(
            f"{_name(path)}: its {label!r} dataset keeps its data in external files, which medvl "
            "does not read; export the features into the .h5 file itself.",
            path,
        )


def check_h5_dataset(
    dataset: h5py.Dataset,
    path: str | os.PathLike[str],
    *,
    out_itemsize: int = 4,
    kinds: str = "biuf",
) -> None:
    """Refuse a dataset that is not numeric (dtype kind in ``kinds``), would take more than the
    array limit once read (its shape x max(itemsize, ``out_itemsize``), and its chunk shape), or
    has chunks never written (they read back as zeros)."""
    with _h5_errors(path):
        _check_h5_dataset(dataset, path, out_itemsize, kinds)


def _check_h5_dataset(
    dataset: h5py.Dataset, path: str | os.PathLike[str], out_itemsize: int, kinds: str
) -> None:
    label = dataset.name.strip("/") if dataset.name else "dataset"
    dtype = dataset.dtype
    if dtype.kind not in kinds or dtype.fields is not None or dtype.subdtype is not None:
        raise UnsupportedFormatError(
            f"{_name(path)}: its {label!r} dataset holds {_dtype_words(dtype)}, not numbers; "
            "give a TRIDENT or CLAM patch-feature file.",
            path,
        )
    shape = tuple(int(v) for v in (dataset.shape or ()))
    itemsize = max(dtype.itemsize, out_itemsize)
    check_array_bytes(path, f"its {label!r} dataset", shape, itemsize)
    chunks = dataset.chunks
    if chunks is not None:
        check_array_bytes(path, f"each chunk of its {label!r} dataset", tuple(chunks), itemsize)
    if math.prod(shape) == 0:
        return
    if chunks is None:
        written = dataset.id.get_storage_size() > 0 or dataset.id.get_offset() is not None
        expected, present = 1, int(written)
    else:
        expected = math.prod(-(-side // step) for side, step in zip(shape, chunks, strict=True))
        present = int(dataset.id.get_num_chunks())
    if present < expected:
        raise DataError(
            f"{_name(path)}: its {label!r} dataset is incomplete ({present} of {expected} "
            "chunks written; the rest would read as zeros); export the features again.",
            path,
        )


def _dtype_words(dtype: np.dtype[Any]) -> str:
    if dtype.kind in "SUO" or (dtype.kind == "O" or dtype.metadata):
        return "text or Python objects"
    if dtype.fields is not None:
        return "records"
    return f"values of type {dtype}"


def h5_attribute(obj: Any, key: str, path: str | os.PathLike[str]) -> Any:
    """Attribute ``key`` of an HDF5 object (None when absent or empty), its size checked first.

    An attribute declaring more than :data:`MAX_ATTRIBUTE_VALUES` values is refused before it
    is read; text comes back as ``str``.
    """
    import h5py

    try:
        if key not in obj.attrs:
            return None
        attr_id = obj.attrs.get_id(key)
        shape = attr_id.shape or ()
        if math.prod(int(v) for v in shape) > MAX_ATTRIBUTE_VALUES:
            raise CorruptFileError(
                f"{_name(path)}: its {key!r} attribute holds {math.prod(shape):,} values, not "
                "one; re-export the file.",
                path,
            )
        value = obj.attrs[key]
    except MedVLError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CorruptFileError(
            f"{_name(path)}: its {key!r} attribute could not be read ({_reason(error)}); "
            "re-export the file.",
            path,
        ) from None
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


# ---- zip archives: CLAM .pt, .npz --------------------------------------------------------


def check_zip_archive(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` resolved, if it is a regular zip file whose members declare, together, no more
    than the array limit once uncompressed (and at most :data:`MAX_ARCHIVE_MEMBERS` members)."""
    resolved = require_data_file(path, what)
    try:
        with zipfile.ZipFile(resolved) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise CorruptFileError(
            f"{_name(path)} is not a readable zip archive ({_reason(error)}); write it again.",
            path,
        ) from None
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise CorruptFileError(
            f"{_name(path)} holds {len(members):,} archive members, more than the "
            f"{MAX_ARCHIVE_MEMBERS:,} medvl reads; the file is damaged or forged, write it again.",
            path,
        )
    total = sum(max(int(member.file_size), 0) for member in members)
    limit = max_array_bytes()
    if total > limit:
        raise _too_big(path, total, limit)
    return resolved


def _too_big(path: str | os.PathLike[str], needed: int, limit: int) -> MedVLError:
    from medvl_engine.errors import ResourceLimitError

    return ResourceLimitError(
        f"{_name(path)}: its contents declare {format_bytes(needed)} once uncompressed, more than "
        f"the {format_bytes(limit)} one file may take (MEDVL_MAX_ARRAY_BYTES); the file is "
        "damaged or forged, or raise the limit if this machine has the memory.",
        path,
    )


def load_npz(path: str | os.PathLike[str], what: str = ".npz file") -> dict[str, np.ndarray]:
    """Every array of an ``.npz``, after :func:`check_zip_archive` and a check of each array's
    declared shape (its ``.npy`` header) against the array limit; never unpickles.

    Raises MedVLError (CorruptFileError for a damaged or pickled archive).
    """
    from numpy.lib import format as npy_format

    resolved = check_zip_archive(path, what)
    limit, total = max_array_bytes(), 0
    try:
        with zipfile.ZipFile(resolved) as archive:
            for member in archive.infolist():
                if not member.filename.endswith(".npy"):
                    continue
                with archive.open(member) as stream:
                    version = npy_format.read_magic(stream)
                    if version == (1, 0):
                        shape, _, dtype = npy_format.read_array_header_1_0(stream)
                    else:
                        shape, _, dtype = npy_format.read_array_header_2_0(stream)
                total += math.prod(int(v) for v in shape) * max(int(dtype.itemsize), 1)
                if total > limit:
                    raise _too_big(path, total, limit)
        with np.load(resolved, allow_pickle=False) as data:
            return {key: np.asarray(data[key]) for key in data.files}
    except MedVLError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise CorruptFileError(
            f"{_name(path)} is not a readable .npz of plain arrays ({_reason(error)}); write it "
            "again.",
            path,
        ) from None


# ---- zarr stores -----------------------------------------------------------------------------


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
        raise DataError(f"{_name(given)}: no such {what}; check the path.", given) from None
    except (OSError, RuntimeError) as error:
        raise DataError(
            f"{_name(given)}: the {what} cannot be inspected ({_reason(error)}); check the path "
            "and its permissions.",
            given,
        ) from None
    if not stat.S_ISDIR(mode):
        raise UnsupportedFormatError(
            f"{_name(given)} is {describe_file_type(mode) if not stat.S_ISREG(mode) else 'a file'}"
            f", not a {what} (a zarr folder); give the folder written by `medvl features`.",
            given,
        )
    pending, seen = [root], 0
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as error:
            raise DataError(
                f"{_name(given)}: a folder of the {what} cannot be listed ({_reason(error)}); "
                "check its permissions.",
                given,
            ) from None
        for entry in entries:
            seen += 1
            if seen > MAX_STORE_ENTRIES:
                raise CorruptFileError(
                    f"{_name(given)} holds more than {MAX_STORE_ENTRIES:,} files, more than any "
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
                    f"{_name(given)}: {relative} is a link to {target.name}, outside the {what}; "
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
            f"{_name(given)}: {relative} is a broken link or a loop of links; extract the "
            "features again.",
            given,
        ) from None
    except OSError as error:
        raise DataError(
            f"{_name(given)}: {relative} cannot be inspected ({_reason(error)}); check its "
            "permissions.",
            given,
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise UnsupportedFormatError(
            f"{_name(given)}: {relative} is {describe_file_type(info.st_mode)}, not a regular "
            f"file, so the {what} is not read; extract the features again.",
            given,
        )
    if entry.name in _METADATA_NAMES and info.st_size > MAX_METADATA_BYTES:
        raise CorruptFileError(
            f"{_name(given)}: its metadata file {relative} is {format_bytes(info.st_size)}, more "
            f"than the {format_bytes(MAX_METADATA_BYTES)} a {what} writes; extract the features "
            "again.",
            given,
        )
    if info.st_size > max_array_bytes():
        raise _too_big(given, info.st_size, max_array_bytes())
    return None


def open_zarr_group(path: str | os.PathLike[str], what: str = "feature store") -> zarr.Group:
    """The zarr group at ``path`` opened read-only, after :func:`check_zarr_tree`."""
    import zarr

    root = check_zarr_tree(path, what)
    try:
        return zarr.open_group(str(root), mode="r")
    except Exception as error:  # zarr raises many types for a folder that is not a group
        raise CorruptFileError(
            f"{_name(path)} is not a readable zarr {what} ({_reason(error)}); extract the "
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
            f"{_name(root)}: its {label!r} array has metadata medvl cannot read "
            f"({_reason(error)}); extract the features again.",
            root,
        ) from None
    if dtype.kind not in kinds or dtype.fields is not None:
        raise UnsupportedFormatError(
            f"{_name(root)}: its {label!r} array holds {_dtype_words(dtype)}, not numbers; "
            "extract the features again.",
            root,
        )
    itemsize = max(dtype.itemsize, out_itemsize)
    check_array_bytes(root, f"its {label!r} array", shape, itemsize)
    if len(chunks) != len(shape) or any(step < 1 for step in chunks):
        raise CorruptFileError(
            f"{_name(root)}: its {label!r} array declares chunks {chunks} for shape {shape}; "
            "extract the features again.",
            root,
        )
    check_array_bytes(root, f"each chunk of its {label!r} array", chunks, itemsize)
    if math.prod(shape) == 0 or not require_all_chunks:
        return
    grid = [-(-side // step) for side, step in zip(shape, chunks, strict=True)]
    if math.prod(grid) > MAX_STORE_ENTRIES:
        raise CorruptFileError(
            f"{_name(root)}: its {label!r} array is split into {math.prod(grid):,} chunks, more "
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
            f"{_name(root)} is incomplete: {missing} of {math.prod(grid)} chunks of its "
            f"{label!r} array are missing (they would read as zeros); extract the features "
            "again.",
            root,
        )
