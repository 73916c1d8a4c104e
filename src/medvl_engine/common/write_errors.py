"""Errors of the machine in words: a write the disk or the file system refused.

Every place that writes what a user asked for (feature stores, the cache, checkpoints, the
metrics log, exports) turns an ``OSError`` into one :class:`~medvl_engine.errors.StorageError`
sentence that names the file or folder, says what went wrong in plain words (the disk is full,
the folder is read-only, permission is denied) and what to do. Writes under the cache folder
(``$MEDVL_CACHE``) say how to point the cache elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

from medvl_engine.errors import MedVLError, StorageError

__all__ = [
    "describe_write_error",
    "make_output_folder",
    "os_error_in",
    "reporting_write_errors",
    "write_error",
]

_FULL = {errno.ENOSPC}
_QUOTA = {getattr(errno, "EDQUOT", errno.ENOSPC)} - _FULL
_READ_ONLY = {errno.EROFS}
_DENIED = {errno.EACCES, errno.EPERM}
_NOT_A_FOLDER = {errno.ENOTDIR, errno.EEXIST}


def write_error(what: str, path: str | os.PathLike[str], error: OSError) -> StorageError:
    """One sentence for ``error`` raised while writing ``what`` ("feature store", "checkpoint")
    at ``path``: ``could not write {what} {path}: {problem} ({system's words}); {advice}.``"""
    path = Path(path)
    return StorageError(
        f"could not write {what} {path}: {describe_write_error(path, error)}.", path
    )


def describe_write_error(path: str | os.PathLike[str], error: OSError) -> str:
    """The problem and the advice for ``error`` at ``path``, without a final full stop."""
    path = Path(path)
    folder = _folder_of(path, error)
    reason = error.strerror or (os.strerror(error.errno) if error.errno else str(error))
    in_cache = _in_cache(path)
    code = error.errno
    if code in _FULL:
        advice = (
            "free space there or set MEDVL_CACHE to a folder on another disk"
            if in_cache
            else "free space there or choose a folder on another disk"
        )
        return f"the disk holding {folder} is full ({reason}); {advice}"
    if code in _QUOTA:
        return (
            f"your disk quota on the disk holding {folder} is used up ({reason}); free space "
            "there or choose a folder on another disk"
        )
    if code == errno.EFBIG:
        return (
            f"the file grew larger than the file system of {folder} or this process's file "
            f"size limit allows ({reason}); choose a folder on another file system or raise "
            "the limit (ulimit -f)"
        )
    if code in _READ_ONLY:
        advice = "set MEDVL_CACHE to a writable folder" if in_cache else "choose a writable folder"
        return f"{folder} is on a read-only file system ({reason}); {advice}"
    if code in _DENIED:
        advice = (
            "set MEDVL_CACHE to a writable folder"
            if in_cache
            else "choose a folder you can write to, or change its permissions"
        )
        return f"{folder} is read-only for this user ({reason}); {advice}"
    if code in _NOT_A_FOLDER:
        blocker = _blocker(Path(error.filename) if error.filename else path)
        kind = "a file" if blocker.is_file() else "a device or other special file"
        return (
            f"{blocker} is in the way: it is {kind}, not a folder ({reason}); choose another path"
        )
    if code == errno.EIO:
        return (
            f"the disk holding {folder} reported an input/output error ({reason}); check the "
            "disk or choose another folder"
        )
    return f"{reason}; check that the folder is writable and has free space"


@contextlib.contextmanager
def reporting_write_errors(what: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an ``OSError`` raised in the block into :func:`write_error`'s StorageError.

    A :class:`MedVLError` raised in the block (already a sentence) passes unchanged.
    """
    try:
        yield
    except MedVLError:
        raise
    except OSError as error:
        raise write_error(what, path, error) from error


def _folder_of(path: Path, error: OSError) -> Path:
    """The folder the failed write was in: the nearest existing folder at or above ``path``
    (``path`` itself when it is a folder)."""
    candidate = path
    for _ in range(64):
        try:
            if candidate.is_dir():
                return candidate
        except OSError:
            pass
        if candidate.parent == candidate:
            break
        candidate = candidate.parent
    return path.parent


def _blocker(path: Path) -> Path:
    """The file standing where a folder of ``path`` should be: ``path`` or an ancestor."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate) and not candidate.is_dir():
            return candidate
    return path


def _in_cache(path: Path) -> bool:
    """True when ``path`` lies inside the cache folder ($MEDVL_CACHE or ~/.cache/medvl)."""
    from medvl_engine.common.cache_root import cache_root

    try:
        root = os.path.abspath(cache_root())
        return os.path.commonpath([root, os.path.abspath(path)]) == root
    except (ValueError, RuntimeError, OSError):
        return False


def make_output_folder(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Create the folder ``path`` (and its parents) for outputs, or say in one sentence why not.

    An existing file (or anything else that is not a folder) at ``path`` is refused with
    ExportError and left as it is; a folder the machine will not create (read-only, no
    permission, disk full) gives :func:`write_error`'s StorageError.
    """
    from medvl_engine.errors import ExportError

    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        kind = "an existing file" if path.is_file() else "something else"
        raise ExportError(
            f"{what} {path} is {kind}, not a folder; give a folder (new or existing) for the "
            "outputs (nothing was changed).",
            path,
        )
    with reporting_write_errors(what, path):
        path.mkdir(parents=True, exist_ok=True)
    return path


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def os_error_in(error: BaseException) -> OSError | None:
    """The machine's refusal behind ``error``, if it is one: ``error`` itself when an OSError,
    the OSError it was raised from or while handling (torch's zip writer turns a failed write
    into a RuntimeError), or one rebuilt from a Rust library's "(os error 28)" (safetensors).
    None for anything else."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            return current
        match = _RUST_OS_ERROR.search(str(current))
        if match is not None:
            code = int(match.group(1))
            return OSError(code, os.strerror(code))
        current = current.__cause__ or current.__context__
    return None
