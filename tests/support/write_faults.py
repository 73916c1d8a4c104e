"""Make the machine refuse writes inside one folder, in-process, as a full or read-only disk does.

``failing_writes(folder, errno.ENOSPC, after_bytes=n)`` lets ``n`` bytes through to files under
``folder`` (across all of them; a write that crosses the budget writes its first part, then
fails) and then makes every further write there raise ``OSError(ENOSPC)``, as a disk that fills
up does. With ``errno.EROFS``, ``EACCES`` or ``EPERM`` opening a file for writing, creating a
folder, renaming or removing under ``folder`` fails at once, as on a read-only file system or a
folder without write permission (chmod does not stop root, so tests use this instead).

It patches ``open`` (builtins and io, which ``Path.open`` uses), ``os.open``, ``os.write``,
``os.mkdir``, ``os.replace``, ``os.rename``, ``os.unlink`` and ``os.rmdir`` for the duration
of the block; writes outside ``folder`` are untouched. ``FaultState.failures`` counts the
refusals, so a test can check the fault was actually hit.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import errno as errno_module
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["FaultState", "failing_writes", "leftovers"]

_REFUSE_AT_ONCE = {errno_module.EROFS, errno_module.EACCES, errno_module.EPERM}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@dataclasses.dataclass
class FaultState:
    folder: str
    code: int
    budget: int
    times: int | None = None
    failures: int = 0
    written: int = 0

    def covers(self, path: Any) -> bool:
        try:
            target = os.path.abspath(os.fsdecode(path))
        except TypeError:  # a file descriptor or an object: not ours to judge
            return False
        return target == self.folder or target.startswith(self.folder + os.sep)

    def refuse(self, path: Any = None) -> OSError:
        self.failures += 1
        if self.times is not None and self.failures >= self.times:
            self.budget = 2**62  # a passing fault (space freed by someone else): writes go on
            self.code = errno_module.ENOSPC
        return OSError(self.code, os.strerror(self.code), None if path is None else str(path))

    def take(self, size: int) -> int:
        """How many of ``size`` bytes still fit (and count them as written)."""
        if self.code in _REFUSE_AT_ONCE:
            return 0
        allowed = max(0, min(size, self.budget - self.written))
        self.written += allowed
        return allowed


class _CountingFile:
    """A file object whose writes draw on the fault's byte budget."""

    def __init__(self, handle: Any, state: FaultState, path: Any) -> None:
        self._handle = handle
        self._state = state
        self._path = path

    def write(self, data: Any) -> int:
        view = memoryview(data) if not isinstance(data, str) else None
        size = len(data) if view is None else view.nbytes
        allowed = self._state.take(size)
        if allowed < size:
            if allowed:
                part = data[:allowed] if view is None else view.cast("B")[:allowed]
                self._handle.write(part)
            raise self._state.refuse(self._path)
        return int(self._handle.write(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __enter__(self) -> _CountingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _writes(mode: str) -> bool:
    return any(flag in mode for flag in "wax+")


@contextlib.contextmanager
def failing_writes(
    folder: str | os.PathLike[str],
    code: int = errno_module.ENOSPC,
    *,
    after_bytes: int = 0,
    times: int | None = None,
) -> Iterator[FaultState]:
    """Refuse writes under ``folder`` with ``OSError(code)`` (see the module docstring).

    ``times``: refuse only that many writes, then let everything through again (a disk on
    which space came back); by default every write after the budget is refused.
    """
    state = FaultState(os.path.abspath(os.fspath(folder)), code, int(after_bytes), times)
    real_open, real_io_open = builtins.open, io.open
    names = ("open", "write", "mkdir", "replace", "rename", "unlink", "rmdir")
    real = {name: getattr(os, name) for name in names}
    counted_fds: set[int] = set()

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not (_writes(mode) and state.covers(file)):
            return real_io_open(file, mode, *args, **kwargs)
        if code in _REFUSE_AT_ONCE:
            raise state.refuse(file)
        return _CountingFile(real_io_open(file, mode, *args, **kwargs), state, file)

    def fake_os_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        ours = bool(flags & _WRITE_FLAGS) and state.covers(path)
        if ours and code in _REFUSE_AT_ONCE:
            raise state.refuse(path)
        fd = real["open"](path, flags, mode, *args, **kwargs)
        if ours:
            counted_fds.add(fd)
        return int(fd)

    def fake_write(fd: int, data: Any) -> int:
        if fd in counted_fds:
            size = memoryview(data).nbytes
            allowed = state.take(size)
            if allowed < size:
                if allowed:
                    real["write"](fd, memoryview(data).cast("B")[:allowed])
                raise state.refuse()
        return int(real["write"](fd, data))

    def guarded(name: str, *paths_at: int) -> Any:
        function = real[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            if code in _REFUSE_AT_ONCE and any(
                index < len(args) and state.covers(args[index]) for index in paths_at
            ):
                raise state.refuse(args[paths_at[0]])
            return function(*args, **kwargs)

        return call

    patches = {
        "open": fake_os_open,
        "write": fake_write,
        "mkdir": guarded("mkdir", 0),
        "replace": guarded("replace", 0, 1),
        "rename": guarded("rename", 0, 1),
        "unlink": guarded("unlink", 0),
        "rmdir": guarded("rmdir", 0),
    }
    builtins.open = fake_open
    io.open = fake_open
    for name, function in patches.items():
        setattr(os, name, function)
    try:
        yield state
    finally:
        builtins.open = real_open
        io.open = real_io_open
        for name, function in real.items():
            setattr(os, name, function)


def leftovers(folder: str | os.PathLike[str]) -> list[Path]:
    """Temporary files writers leave when interrupted: medvl's and zarr's (``*.partial``)."""
    return sorted(
        path
        for path in Path(folder).rglob("*")
        if ".medvl-tmp-" in path.name or path.name.endswith(".partial")
    )
