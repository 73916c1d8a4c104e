"""Zip archives (CLAM ``.pt``, ``.npz``): members counted and sized before anything is inflated."""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path

import numpy as np

from medvl_engine.errors import CorruptFileError, MedVLError
from medvl_engine.guarded_files._common import (
    MAX_ARCHIVE_MEMBERS,
    name_of,
    reason,
    require_data_file,
    too_big_error,
)
from medvl_engine.io.limits import max_array_bytes

__all__ = ["check_zip_archive", "load_npz"]


def check_zip_archive(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` resolved, if it is a regular zip file whose members declare, together, no more
    than the array limit once uncompressed (and at most :data:`MAX_ARCHIVE_MEMBERS` members)."""
    resolved = require_data_file(path, what)
    try:
        with zipfile.ZipFile(resolved) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise CorruptFileError(
            f"{name_of(path)} is not a readable zip archive ({reason(error)}); write it again.",
            path,
        ) from None
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise CorruptFileError(
            f"{name_of(path)} holds {len(members):,} archive members, more than the "
            f"{MAX_ARCHIVE_MEMBERS:,} medvl reads; the file is damaged or forged, write it again.",
            path,
        )
    total = sum(max(int(member.file_size), 0) for member in members)
    limit = max_array_bytes()
    if total > limit:
        raise too_big_error(path, total, limit)
    return resolved


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
                    raise too_big_error(path, total, limit)
        with np.load(resolved, allow_pickle=False) as data:
            return {key: np.asarray(data[key]) for key in data.files}
    except MedVLError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise CorruptFileError(
            f"{name_of(path)} is not a readable .npz of plain arrays ({reason(error)}); write it "
            "again.",
            path,
        ) from None
