"""How `medvl`, `medvl-train` and `napari-medvl-demo` talk on the terminal.

On failure stderr holds one line: our sentence. For the run of a command the log records and
Python warnings of the file-format libraries are kept off the terminal (``--verbose`` lets
them through and adds the underlying reasons after the sentence); a progress line that is
still open (``\\r``-rewritten, no newline yet) is ended before anything else is printed; file
names that are not valid UTF-8 are shown with their raw bytes as ``\\xNN``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from medvl_engine.common.reason import one_line
from medvl_engine.common.termination import Terminated
from medvl_engine.errors import MedVLError

__all__ = [
    "LIBRARY_LOGGERS",
    "command_session",
    "end_progress_line",
    "printable",
    "report_error",
    "report_stop",
]

LIBRARY_LOGGERS = (
    "tifffile",
    "tiffslide",
    "pydicom",
    "zarr",
    "numcodecs",
    "imagecodecs",
    "PIL",
    "fsspec",
    "h5py",
    "transformers",
    "huggingface_hub",
    "tokenizers",
    "safetensors",
)
"""Loggers (and the packages whose warnings) kept quiet during a command unless ``--verbose``."""

_LIBRARY_MODULES = r"(" + "|".join(LIBRARY_LOGGERS) + r")(\.|$)"
_HUB_PROGRESS_BARS = "HF_HUB_DISABLE_PROGRESS_BARS"
# transformers reads this when it is imported and then resets its loggers' level from it (its
# "LOAD REPORT" tables are warnings), so the logger levels above alone cannot hold it back.
_TRANSFORMERS_VERBOSITY = "TRANSFORMERS_VERBOSITY"


def printable(text: str) -> str:
    """``text`` safe to print anywhere: undecodable file-name bytes (surrogate escapes, as in
    ``os.fsdecode``) become ``\\xNN``, other unencodable characters ``\\uNNNN``."""
    raw = text.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "backslashreplace")


class _LineTracker:
    """Wraps a text stream and remembers whether the last line written to it is unfinished."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.line_open = False

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if text:
            self.line_open = not text.endswith("\n")
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def end_progress_line() -> None:
    """Finish a ``\\r`` progress line on stderr, if one is open, so the next text starts a line."""
    stream = sys.stderr
    if isinstance(stream, _LineTracker) and stream.line_open:
        stream.write("\n")
        stream.flush()


@contextlib.contextmanager
def command_session(verbose: bool = False) -> Iterator[None]:
    """The run of one command: stderr line tracking and, unless ``verbose``, quiet libraries.

    Log records of :data:`LIBRARY_LOGGERS` (at any level) and Python warnings raised from
    those packages are dropped, and the Hugging Face libraries, when imported during the
    block, draw no "Loading weights" bars; everything is put back as it was when it ends.
    """
    original_stderr = sys.stderr
    sys.stderr = _LineTracker(original_stderr)
    loggers = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    levels = [logger.level for logger in loggers]
    hide_bars = not verbose and _HUB_PROGRESS_BARS not in os.environ
    hide_reports = not verbose and _TRANSFORMERS_VERBOSITY not in os.environ
    try:
        with warnings.catch_warnings():
            if not verbose:
                warnings.filterwarnings("ignore", module=_LIBRARY_MODULES)
                for logger in loggers:
                    logger.setLevel(logging.CRITICAL + 1)
            if hide_bars:
                os.environ[_HUB_PROGRESS_BARS] = "1"
            if hide_reports:
                os.environ[_TRANSFORMERS_VERBOSITY] = "error"
            with _no_transformers_bars(active=not verbose):
                yield
    finally:
        if hide_bars:
            os.environ.pop(_HUB_PROGRESS_BARS, None)
        if hide_reports:
            os.environ.pop(_TRANSFORMERS_VERBOSITY, None)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        if sys.stderr is not original_stderr and isinstance(sys.stderr, _LineTracker):
            sys.stderr = original_stderr


@contextlib.contextmanager
def _no_transformers_bars(active: bool) -> Iterator[None]:
    """Switch off transformers' own "Loading weights" bars when it was imported already (the
    environment variables only reach an import that happens later)."""
    module = sys.modules.get("transformers.utils.logging")
    if not active or module is None or not module.is_progress_bar_enabled():
        yield
        return
    module.disable_progress_bar()
    try:
        yield
    finally:
        module.enable_progress_bar()


def report_error(program: str, error: BaseException, verbose: bool = False) -> None:
    """Print ``error`` as one line "program: error: sentence" on stderr.

    With ``verbose``, each underlying exception (``__cause__`` / ``__context__`` chain) follows
    on its own "program: reason: Type: text" line, its text unshortened.
    """
    end_progress_line()
    print(f"{program}: error: {printable(one_line(str(error)))}", file=sys.stderr, flush=True)
    if not verbose:
        return
    seen = {id(error)}
    cause = error.__cause__ or error.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        text = one_line(str(cause), limit=1_000_000)
        print(f"{program}: reason: {type(cause).__name__}: {printable(text)}", file=sys.stderr)
        cause = cause.__cause__ or cause.__context__


def report_stop(program: str, message: str) -> None:
    """Print why the run stopped early ("interrupted", "stopped (SIGTERM)") on its own line."""
    end_progress_line()
    print(f"{program}: {message}", file=sys.stderr, flush=True)


def run_reported(
    program: str,
    body: Callable[[], int | None],
    *,
    debug: bool = False,
    verbose: bool = False,
    resume_hint: str = "",
) -> int:
    """Run a command's ``body`` and return its exit status: our errors print one line and
    return their exit code (re-raised with ``debug``), Ctrl+C prints "interrupted" (130), SIGTERM
    "stopped (SIGTERM)" (its signal status); ``resume_hint`` follows a stop after "; "."""
    hint = f"; {resume_hint}" if resume_hint else ""
    try:
        return int(body() or 0)
    except MedVLError as error:
        if debug:
            raise
        report_error(program, error, verbose=verbose)
        return error.exit_code
    except KeyboardInterrupt:
        report_stop(program, f"interrupted{hint}")
        return 130
    except Terminated as stop:
        report_stop(program, f"stopped (SIGTERM){hint}")
        return stop.exit_status
