"""SIGTERM as an exception, so ``finally`` blocks (temporary-file cleanup) run when a job is
stopped, and short sections that must not be cut in two (renaming a set of outputs).

By default Python dies at once on SIGTERM and leaves every temporary file behind. The command
lines call :func:`stop_signals_raise` for their whole run: SIGTERM then raises
:class:`Terminated` (SIGINT keeps raising KeyboardInterrupt), unwinding through the cleanup
code. Inside :func:`uninterrupted` both signals are held back and raised when it ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["Terminated", "stop_signals_raise", "uninterrupted"]

SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


class Terminated(SystemExit):
    """The process was asked to stop (SIGTERM); exits with status 143 if nothing catches it."""

    def __init__(self) -> None:
        super().__init__(SIGTERM_EXIT_STATUS)
        self.exit_status: int = SIGTERM_EXIT_STATUS


class _HeldSignals:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.pending: int | None = None


_held = _HeldSignals()


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def _handler(signum: int, frame: FrameType | None) -> None:
    if _held.depth > 0:
        # SIGTERM outranks SIGINT when both arrive while held
        if _held.pending is None or signum == signal.SIGTERM:
            _held.pending = signum
        return
    _raise_for(signum)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """For the duration: SIGTERM raises :class:`Terminated`, SIGINT raises KeyboardInterrupt.

    Only the main thread can set signal handlers; elsewhere this does nothing. The previous
    handlers are put back on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        signum: signal.signal(signum, _handler) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold SIGTERM and SIGINT (when :func:`stop_signals_raise` is active) until the block ends.

    A signal that arrived meanwhile is raised as soon as the outermost block is left.
    """
    with _held.lock:
        _held.depth += 1
    try:
        yield
    finally:
        with _held.lock:
            _held.depth -= 1
            signum = _held.pending if _held.depth == 0 else None
            if signum is not None:
                _held.pending = None
        if signum is not None:
            if threading.current_thread() is threading.main_thread():
                _raise_for(signum)
            signal.raise_signal(signum)  # handled again, now unheld, in the main thread
