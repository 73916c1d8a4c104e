"""Third-party loaders on a model folder: their failures become one sentence and their logs and
progress bars are silenced meanwhile (:func:`folder_errors`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from medvl_engine.errors import MedVLError, ModelNotFoundError

__all__ = ["folder_errors"]

_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved: tuple[int, bool] | None = None


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' progress bars and load reports; the user gets our one sentence.

    Counted across threads: the settings come back when the last of several models loading
    at once (two docks) is done, not when the first one is.
    """
    try:
        from medvl_engine.common.hf_classes import transformers_logging
    except ImportError:  # pragma: no cover - transformers is a core dependency
        yield
        return
    global _quiet_depth, _quiet_saved
    with _quiet_lock:
        if _quiet_depth == 0:
            _quiet_saved = (
                transformers_logging.get_verbosity(),
                transformers_logging.is_progress_bar_enabled(),
            )
            transformers_logging.set_verbosity_error()
            transformers_logging.disable_progress_bar()
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0 and _quiet_saved is not None:
                verbosity, bars = _quiet_saved
                transformers_logging.set_verbosity(verbosity)
                if bars:
                    transformers_logging.enable_progress_bar()


@contextmanager
def folder_errors(folder: Path, what: str) -> Iterator[None]:
    """Turn failures of third-party loaders on a folder's files into one sentence.

    transformers and tokenizers raise many exception types (some plain ``Exception``) for
    damaged files or configs that do not fit the weights; the user gets the folder and what
    to do, and the original error stays chained for ``--debug``. transformers' own load
    reports and progress bars are silenced meanwhile.
    """
    try:
        with _quiet_transformers():
            yield
    except MedVLError:
        raise
    except Exception as error:  # noqa: BLE001 - third-party parse errors have no common base
        raise ModelNotFoundError(
            f"The {what} in {folder} are damaged or do not fit together (sizes in config.json "
            "that differ from the saved weights, or unreadable files); download or save the "
            "model again.",
            folder,
        ) from error
