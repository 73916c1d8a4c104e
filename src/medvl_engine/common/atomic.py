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

Temporary files and folders are named ``.{name}.medvl-tmp-{host}-{pid}-{random}{suffix}``.
An interrupted write removes its own on the way out (any exception, and SIGTERM once the
command line turned it into one, see :mod:`medvl_engine.common.termination`); what a killed process
(SIGKILL, power loss) left behind is swept by the next write into the same folder: files of a
process that is gone on this machine, or older than :data:`STALE_AFTER_SECONDS` when written
from another machine. Outputs written inside :func:`atomic_group` are renamed together at the
end of the block, so they are either all old or all new (see :func:`atomic_group`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from medvl_engine.common.termination import uninterrupted
from medvl_engine.common.write_errors import os_error_in, write_error
from medvl_engine.errors import ExportError, MedVLError

__all__ = [
    "STALE_AFTER_SECONDS",
    "atomic_directory",
    "atomic_group",
    "atomic_write",
    "atomic_write_stream",
    "sweep_stale_temporaries",
]

STALE_AFTER_SECONDS = 3600.0
"""Age after which a temporary left by a process on another machine (or by an older medvl that
did not put its process id in the name) is removed."""

_SWEEP_INTERVAL_SECONDS = 60.0
_TEMPORARY_MARK = ".medvl-tmp-"
_TEMPORARY_NAME = re.compile(
    r"^\.(?P<name>.+)\.medvl-tmp-(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]+)-[0-9a-f]{8}(?P<suffix>.*)$"
)


def atomic_write(path: str | Path, write: Callable[[Path], object], *, what: str = "file") -> Path:
    """Call ``write(temporary_path)`` then rename it to ``path``; on failure nothing is left.

    The temporary file sits in the same folder (same file system) and keeps ``path``'s suffix,
    so the rename is atomic: readers see either the old file or the complete new one.
    ``what`` names the file in the error sentence ("slide", "manifest", "checkpoint"...).
    Inside :func:`atomic_group` the rename waits for the end of the group.
    Raises :class:`ExportError` when the folder is missing or the write fails with an OSError.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise ExportError(
            f"could not write {what} {path}: folder {path.parent} does not exist; create it first",
            path,
        )
    sweep_stale_temporaries(path.parent)
    group = _active_group.get()
    temporary_path: Path | None = None
    try:
        temporary_path, mode = _create_temporary(path)
        write(temporary_path)
        if (os.stat(temporary_path).st_mode & 0o7777) != mode:
            os.chmod(temporary_path, mode)  # the writer replaced the file we created
        if group is not None:
            group.add(temporary_path, path, what)
        else:
            os.replace(temporary_path, path)
    except MedVLError:
        _discard(temporary_path)
        raise
    except OSError as error:
        _discard(temporary_path)
        raise _write_error(what, path, error) from error
    except BaseException as error:
        _discard(temporary_path)
        refusal = os_error_in(error) if isinstance(error, Exception) else None
        if refusal is None:
            raise
        raise _write_error(what, path, refusal) from error  # e.g. torch or safetensors: disk full
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


@dataclasses.dataclass
class _Group:
    """Finished temporaries waiting for their rename: final path -> (temporary, what)."""

    pending: dict[Path, tuple[Path, str]] = dataclasses.field(default_factory=dict)

    def add(self, temporary: Path, path: Path, what: str) -> None:
        final = Path(os.path.abspath(path))
        replaced = self.pending.pop(final, None)
        if replaced is not None:  # the same output written twice: the last one wins
            _discard(replaced[0])
        self.pending[final] = (temporary, what)

    def commit(self) -> None:
        with uninterrupted():
            while self.pending:
                final, (temporary, what) = next(iter(self.pending.items()))
                try:
                    os.replace(temporary, final)
                except OSError as error:
                    raise _write_error(what, final, error) from error
                del self.pending[final]

    def discard(self) -> None:
        for temporary, _ in self.pending.values():
            _discard(temporary)
        self.pending.clear()


_active_group: contextvars.ContextVar[_Group | None] = contextvars.ContextVar(
    "medvl_atomic_group", default=None
)


@contextlib.contextmanager
def atomic_group() -> Iterator[None]:
    """Rename the files that :func:`atomic_write` writes in this block together, at its end.

    Every output is first written completely under its temporary name; only when the block
    ends without an exception are they renamed, one after another with SIGTERM and SIGINT
    held back (see :mod:`medvl_engine.common.termination`). A failed or stopped job therefore
    leaves the previous set of outputs as it was. What is not possible: the renames are
    separate system calls, so a SIGKILL or power loss in the microseconds between two of them
    can leave some new files beside old ones (each file itself complete). A file written in
    the block is not at its final path before the block ends. A nested group joins the
    outer one; writes from other threads are not grouped. Folders built by
    :func:`atomic_directory` are never grouped.
    """
    if _active_group.get() is not None:
        yield
        return
    group = _Group()
    token = _active_group.set(group)
    reset = False
    try:
        yield
        _active_group.reset(token)
        reset = True
        group.commit()
    finally:
        if not reset:
            _active_group.reset(token)
        group.discard()


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
        sweep_stale_temporaries(folder.parent)
        workspace = _create_temporary_folder(folder)
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
    except MedVLError:
        raise
    except Exception as error:
        refusal = os_error_in(error)  # a library's wrapping of a full disk (safetensors, torch)
        if refusal is None:
            raise
        raise _write_error(what, folder, refusal) from error
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return folder


def _create_temporary(path: Path) -> tuple[Path, int]:
    """Create an empty ``.{stem}.medvl-tmp-...{suffix}`` beside ``path`` as ``open()`` would.

    Returns the file and the permission bits (``st_mode & 0o7777``) it was created with:
    0o666 less the umask, or what the folder's default ACL gives.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        candidate = path.parent / f".{path.stem}{_temporary_tag()}{path.suffix}"
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


def _create_temporary_folder(folder: Path) -> Path:
    """Create an empty ``.{name}.medvl-tmp-...`` folder beside ``folder`` (mode 0o700)."""
    for _ in range(100):
        candidate = folder.parent / f".{folder.name}{_temporary_tag()}"
        try:
            candidate.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"no free temporary name beside {folder}")


def _temporary_tag() -> str:
    return f"{_TEMPORARY_MARK}{_HOST_TAG}-{os.getpid()}-{secrets.token_hex(4)}"


_HOST_TAG = hashlib.sha1(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:6]


def _write_error(what: str, path: Path, error: OSError) -> ExportError:
    """One sentence naming ``path`` and the problem in words (disk full, read-only...)."""
    return write_error(what, path, error)


def _discard(temporary_path: Path | None) -> None:
    if temporary_path is not None:
        temporary_path.unlink(missing_ok=True)


_last_sweep: dict[str, float] = {}


def sweep_stale_temporaries(folder: str | Path, *, force: bool = False) -> list[Path]:
    """Remove the temporary files and folders that killed writers left in ``folder``.

    Removed: ``.{name}.medvl-tmp-{host}-{pid}-...`` entries whose process is gone (or whose
    process id now belongs to a process started after the entry was last written) when
    ``host`` is this machine, and entries from other machines older than
    :data:`STALE_AFTER_SECONDS`; also the ``.{name}-XXXXXXXX{suffix}`` temporaries of older
    medvl versions, when older than that and ``{name}{suffix}`` is beside them. A folder
    interrupted between moving the old copy aside and renaming the new one gets its old
    copy back. Each folder is looked at most once a minute per process unless ``force``.
    Returns the removed paths; entries that cannot be removed are left alone.
    """
    folder = Path(folder)
    key = os.path.abspath(folder)
    now = time.monotonic()
    if not force and now - _last_sweep.get(key, -_SWEEP_INTERVAL_SECONDS) < _SWEEP_INTERVAL_SECONDS:
        return []
    _last_sweep[key] = now
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    names = {entry.name for entry in entries}
    for entry in entries:
        if not entry.name.startswith(".") or entry.is_symlink():
            continue
        try:
            modified = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if _is_stale(Path(entry.path), modified, names):
            if _remove_temporary(Path(entry.path), entry.is_dir(follow_symlinks=False)):
                removed.append(Path(entry.path))
    return removed


# ``secrets.token_hex(4)`` with at least one letter, so that dated names (".a-20240101.csv")
# never match
_LEGACY_FILE = re.compile(r"^\.(?P<stem>.+)-(?=[0-9]*[a-f])[0-9a-f]{8}(?P<suffix>\.[^.]+)?$")
_LEGACY_FOLDER = re.compile(r"^\.(?P<stem>.+)-[a-z0-9_]{8}$")


def _is_stale(path: Path, modified: float, siblings: set[str]) -> bool:
    name = path.name
    age = time.time() - modified
    match = _TEMPORARY_NAME.match(name)
    if match is not None:
        if match["host"] != _HOST_TAG:
            return age > STALE_AFTER_SECONDS
        pid = int(match["pid"])
        if pid == os.getpid():
            return False
        if not _process_alive(pid):
            return True
        started = _process_start_time(pid)
        return started is not None and started > modified + 2.0  # the pid was reused
    if age <= STALE_AFTER_SECONDS:
        return False
    legacy = _LEGACY_FILE.match(name)
    if legacy is not None and f"{legacy['stem']}{legacy['suffix'] or ''}" in siblings:
        return True
    legacy = _LEGACY_FOLDER.match(name)
    return legacy is not None and legacy["stem"] in siblings and _holds_only_staging(path)


def _holds_only_staging(path: Path) -> bool:
    """True for a folder whose entries are only the "new" and "previous" of a staging area."""
    try:
        entries = {entry.name for entry in os.scandir(path)}
    except OSError:
        return False
    return bool(entries) and entries <= {"new", "previous"}


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else (or cannot tell: keep its files)
    return True


def _process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), where /proc tells; else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of proc(5); the split starts at field 3
        with open("/proc/stat") as stat:
            boot = next(float(line.split()[1]) for line in stat if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _remove_temporary(path: Path, is_folder: bool) -> bool:
    if not is_folder:
        try:
            path.unlink()
        except OSError:
            return False
        return True
    previous = path / "previous"
    stem = _TEMPORARY_NAME.match(path.name) or _LEGACY_FOLDER.match(path.name)
    if stem is None:
        return False
    final = path.parent / (stem["name"] if "name" in stem.groupdict() else stem["stem"])
    if previous.is_dir() and not os.path.lexists(final):
        try:
            os.replace(previous, final)  # killed between moving the old folder aside and renaming
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)
