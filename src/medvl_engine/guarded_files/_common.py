"""What every guarded reader shares: the regular-file check, size limits, sentence parts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import MedVLError, UnsupportedFormatError
from medvl_engine.io.limits import format_bytes
from medvl_engine.io.safe_open import require_regular_file

__all__ = [
    "LINK_HOPS",
    "MAX_ARCHIVE_MEMBERS",
    "MAX_ATTRIBUTE_VALUES",
    "MAX_METADATA_BYTES",
    "MAX_STORE_ENTRIES",
    "METADATA_NAMES",
    "dtype_words",
    "reason",
    "name_of",
    "require_data_file",
    "too_big_error",
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

METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
LINK_HOPS = 16


def name_of(path: str | os.PathLike[str]) -> str:
    """The file name a sentence starts with (the path itself when it has no name part)."""
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


def reason(error: BaseException) -> str:
    """The first line of a library's error, at most 120 characters, for a sentence's brackets."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text[:120] or type(error).__name__


def dtype_words(dtype: np.dtype[Any]) -> str:
    """A stored type in words: "text or Python objects", "records" or "values of type T"."""
    if dtype.kind in "SUO" or (dtype.kind == "O" or dtype.metadata):
        return "text or Python objects"
    if dtype.fields is not None:
        return "records"
    return f"values of type {dtype}"


def too_big_error(path: str | os.PathLike[str], needed: int, limit: int) -> MedVLError:
    """The sentence for contents that would inflate past the array limit (a compression bomb)."""
    from medvl_engine.errors import ResourceLimitError

    return ResourceLimitError(
        f"{name_of(path)}: its contents declare {format_bytes(needed)} once uncompressed, more "
        f"than the {format_bytes(limit)} one file may take (MEDVL_MAX_ARRAY_BYTES); the file is "
        "damaged or forged, or raise the limit if this machine has the memory.",
        path,
    )
