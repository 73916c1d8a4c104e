"""Atomic file writes: a temporary file in the destination folder, renamed into place.

Every file the engine saves for a user (exports, synthetic data, manifests, checkpoints) goes
through :func:`atomic_write` or :func:`atomic_write_stream`, and every model or cache folder
through :func:`atomic_directory`, so a failed or interrupted write never leaves a half-written
file or folder and reports one sentence naming it.

Finished files and folders get the permissions a plain ``open()`` or ``mkdir()`` would give
them (0o666, folders 0o777, less the process umask and as any default ACL decides), not the
owner-only 0o600/0o700 of :mod:`tempfile`: the temporary file is created by ``os.open`` with
mode 0o666 at write time, so the kernel applies the umask in force then, with no
process-wide ``os.umask`` call that could race with other threads.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from medvl_engine.errors import ExportError, MedVLError

__all__ = ["atomic_directory", "atomic_write", "atomic_write_stream"]


def atomic_write(path: str | Path, write: Callable[[Path], object], *, what: str = "file") -> Path:
    """Call ``write(temporary_path)`` then rename it to ``path``; on failure nothing is left.

    The temporary file sits in the same folder (same file system) and keeps ``path``'s suffix,
    so the rename is atomic: readers see either the old file or the complete new one.
    ``what`` names the file in the error sentence ("slide", "manifest", "checkpoint"...).
    Raises :class:`ExportError` when the folder is missing or the write fails with an OSError.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise ExportError(
            f"could not write {what} {path}: folder {path.parent} does not exist; create it first",
            path,
        )
    temporary_path: Path | None = None
    try:
        temporary_path, mode = _create_temporary(path)
        write(temporary_path)
        if (os.stat(temporary_path).st_mode & 0o7777) != mode:
            os.chmod(temporary_path, mode)  # the writer replaced the file we created
        os.replace(temporary_path, path)
    except MedVLError:
        _discard(temporary_path)
        raise
    except OSError as error:
        _discard(temporary_path)
        raise _write_error(what, path, error) from error
    except BaseException:
        _discard(temporary_path)
        raise
    return path


def atomic_write_stream(
    path: str | Path,
    write: Callable[[IO[Any]], object],
    *,
    binary: bool = False,
    what: str = "file",
) -> Path:
    """:func:`atomic_write` for writers that take an open file: ``write(handle)``.

    Text handles are UTF-8 with ``newline=""`` (what the csv module expects); the data is
    flushed to disk (fsync) before the rename.
    """

    def write_handle(temporary: Path) -> None:
        options: dict[str, Any] = {} if binary else {"encoding": "utf-8", "newline": ""}
        with open(temporary, "wb" if binary else "w", **options) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())

    return atomic_write(path, write_handle, what=what)


def atomic_directory(
    folder: str | Path,
    fill: Callable[[Path], object],
    *,
    what: str = "folder",
    keep_if_present: str | None = None,
) -> Path:
    """Build ``folder`` atomically: ``fill(staging)`` writes into an empty sibling folder that
    is then renamed to ``folder``.

    An existing ``folder`` is moved aside and removed only once the new one is in place (and
    put back if the rename fails). With ``keep_if_present`` (the name of the file that marks a
    complete folder, e.g. "model.safetensors"), a complete ``folder`` that another process
    finished first is kept instead of replaced. Missing parent folders are created.
    Raises :class:`ExportError` when the file system refuses.
    """
    folder = Path(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        workspace = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as error:
        raise _write_error(what, folder, error) from error
    staging, previous = workspace / "new", workspace / "previous"
    try:
        staging.mkdir()
        fill(staging)
        if keep_if_present is not None:
            try:
                os.replace(staging, folder)
            except OSError:
                if not (folder / keep_if_present).is_file():
                    raise
        else:
            if folder.exists():
                os.replace(folder, previous)
            try:
                os.replace(staging, folder)
            except OSError:
                if previous.exists():
                    os.replace(previous, folder)
                raise
    except OSError as error:
        raise _write_error(what, folder, error) from error
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return folder


def _create_temporary(path: Path) -> tuple[Path, int]:
    """Create an empty ``.{stem}-XXXXXXXX{suffix}`` beside ``path`` as ``open()`` would.

    Returns the file and the permission bits (``st_mode & 0o7777``) it was created with:
    0o666 less the umask, or what the folder's default ACL gives.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        candidate = path.parent / f".{path.stem}-{secrets.token_hex(4)}{path.suffix}"
        try:
            fd = os.open(candidate, flags, 0o666)
        except FileExistsError:
            continue
        try:
            mode = os.fstat(fd).st_mode & 0o7777
        finally:
            os.close(fd)
        return candidate, mode
    raise FileExistsError(f"no free temporary name beside {path}")


def _write_error(what: str, path: Path, error: OSError) -> ExportError:
    return ExportError(
        f"could not write {what} {path}: {error.strerror or error}; check that the folder "
        "is writable and has free space",
        path,
    )


def _discard(temporary_path: Path | None) -> None:
    if temporary_path is not None:
        temporary_path.unlink(missing_ok=True)
