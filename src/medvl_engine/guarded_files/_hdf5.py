"""HDF5 (TRIDENT/CLAM ``.h5``): opened only as regular files, links followed inside the file
only, external and virtual storage refused, declared sizes checked before reading."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvl_engine.errors import CorruptFileError, DataError, MedVLError, UnsupportedFormatError
from medvl_engine.guarded_files._common import (
    LINK_HOPS,
    MAX_ATTRIBUTE_VALUES,
    dtype_words,
    name_of,
    reason,
    require_data_file,
)
from medvl_engine.io.limits import check_array_bytes

if TYPE_CHECKING:
    import h5py

__all__ = ["check_h5_dataset", "h5_attribute", "h5_dataset", "open_h5", "open_h5_file"]


def open_h5_file(path: str | os.PathLike[str], what: str = "feature file") -> h5py.File:
    """An HDF5 file opened read-only after :func:`require_data_file`; the caller closes it."""
    import h5py

    resolved = require_data_file(path, what)
    try:
        return h5py.File(resolved, "r")
    except (OSError, ValueError):
        raise CorruptFileError(
            f"{name_of(path)} is not a readable HDF5 file (damaged or truncated); re-export it.",
            path,
        ) from None


@contextmanager
def open_h5(path: str | os.PathLike[str], what: str = "feature file") -> Iterator[h5py.File]:
    """:func:`open_h5_file` as a context manager; h5py errors inside it become CorruptFileError."""
    handle = open_h5_file(path, what)
    try:
        with _h5_errors(path):
            yield handle
    finally:
        handle.close()


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
                f"{name_of(path)} has no {name.strip('/')!r} dataset; give a TRIDENT or CLAM "
                "patch-feature file.",
                path,
            )
        return None
    import h5py

    if not isinstance(obj, h5py.Dataset):
        raise UnsupportedFormatError(
            f"{name_of(path)}: {name.strip('/')!r} is a group, not a dataset; give a TRIDENT or "
            "CLAM patch-feature file.",
            path,
        )
    with _h5_errors(path):
        _refuse_outside_storage(obj, name, path)
    return obj


@contextmanager
def _h5_errors(
    path: str | os.PathLike[str],
    what: str = "its contents",
    advice: str = "the file is damaged, re-export it",
) -> Iterator[None]:
    """h5py's errors for damaged metadata (many types) as one CorruptFileError sentence:
    "<file>: ``what`` could not be read (<reason>); ``advice``."; MedVLError passes."""
    try:
        yield
    except MedVLError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CorruptFileError(
            f"{name_of(path)}: {what} could not be read ({reason(error)}); {advice}.",
            path,
        ) from None


def _follow(
    handle: h5py.File, name: str, path: str | os.PathLike[str], hops: int, requested: str
) -> Any:
    """The object at ``name``, each link followed by hand (see :func:`h5_dataset`)."""
    import h5py

    if hops > LINK_HOPS:
        raise CorruptFileError(
            f"{name_of(path)}: {requested.strip('/')!r} is reached through a cycle of soft links "
            f"(or more than {LINK_HOPS} of them); re-export the file.",
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
                f"{name_of(path)}: {part!r} is a link{where} outside this file, which medvl does "
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
            f"{name_of(path)}: its {label!r} dataset is virtual (its data lives in other files), "
            "which medvl does not read; export the features into the .h5 file itself.",
            path,
        )
    if dataset.id.get_create_plist().get_external_count() > 0:
        raise UnsupportedFormatError(
            f"{name_of(path)}: its {label!r} dataset keeps its data in external files, which medvl "
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
            f"{name_of(path)}: its {label!r} dataset holds {dtype_words(dtype)}, not numbers; "
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
            f"{name_of(path)}: its {label!r} dataset is incomplete ({present} of {expected} "
            "chunks written; the rest would read as zeros); export the features again.",
            path,
        )


def h5_attribute(obj: Any, key: str, path: str | os.PathLike[str]) -> Any:
    """Attribute ``key`` of an HDF5 object (None when absent or empty), its size checked first.

    An attribute declaring more than :data:`MAX_ATTRIBUTE_VALUES` values is refused before it
    is read; text comes back as ``str``.
    """
    import h5py

    with _h5_errors(path, f"its {key!r} attribute", "re-export the file"):
        if key not in obj.attrs:
            return None
        attr_id = obj.attrs.get_id(key)
        shape = attr_id.shape or ()
        if math.prod(int(v) for v in shape) > MAX_ATTRIBUTE_VALUES:
            raise CorruptFileError(
                f"{name_of(path)}: its {key!r} attribute holds {math.prod(shape):,} values, not "
                "one; re-export the file.",
                path,
            )
        value = obj.attrs[key]
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
