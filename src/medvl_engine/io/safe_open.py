"""Refuse paths that are not regular files before anything opens them.

Opening a named pipe blocks until a writer appears, a device such as ``/dev/zero`` never
ends, and ``/proc`` or ``/sys`` entries report a size of zero while yielding endless or
process-private bytes. Every reader checks its input with :func:`require_regular_file`
first: it only calls ``os.stat`` (after resolving symlinks), never ``open``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from medvl_engine.errors import MedVLError, UnsupportedFormatError

__all__ = ["PSEUDO_FILE_SYSTEMS", "describe_file_type", "require_regular_file"]

PSEUDO_FILE_SYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))
"""Folders of kernel-made files: their entries look like files but are not stored data."""

_FILE_TYPES = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def describe_file_type(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words ("a named pipe (FIFO)", "a folder", ...)."""
    for test, words in _FILE_TYPES:
        if test(mode):
            return words
    return "not a regular file"


def _under_pseudo_file_system(resolved: Path) -> bool:
    return any(resolved == root or root in resolved.parents for root in PSEUDO_FILE_SYSTEMS)


def require_regular_file(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved (symlinks followed), if it is a regular file holding stored data.

    Raises MedVLError when the path does not exist or cannot be inspected, and
    UnsupportedFormatError for a named pipe, device, socket, folder, or an entry of
    ``/proc``, ``/sys`` or ``/dev``. Nothing is opened, so a pipe without a writer
    cannot block the caller.
    """
    given = Path(path)
    name = given.name or str(given)
    try:
        resolved = given.resolve(strict=True)
        mode = os.stat(resolved).st_mode
    except FileNotFoundError as error:
        raise MedVLError(f"{name}: no such file or folder; check the path.", given) from error
    except RuntimeError as error:  # a symlink loop
        raise MedVLError(
            f"{name}: the path is a loop of symbolic links; point it at the image file itself.",
            given,
        ) from error
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise MedVLError(
            f"{name}: cannot be inspected ({reason}); check the path and its permissions.", given
        ) from error
    if not stat.S_ISREG(mode):
        raise UnsupportedFormatError(
            f"{name}: is {describe_file_type(mode)}, not a regular file, so it is not read; "
            "give the path of the image file itself.",
            given,
        )
    if _under_pseudo_file_system(resolved):
        raise UnsupportedFormatError(
            f"{name}: points into /{resolved.parts[1]}, where entries "
            "are made by the system and hold no stored image; give the path of the image file "
            "itself.",
            given,
        )
    return resolved
