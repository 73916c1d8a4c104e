"""JSONL metrics and a progress bar with ETA, written by rank 0 only."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import IO, Any

from medvl_engine.common.write_errors import reporting_write_errors

__all__ = ["MetricsLog", "Progress", "RunOutputs"]


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _plain(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class MetricsLog:
    """Appends one JSON object per line to ``path`` (flushed at once); inactive off rank 0.

    A write the machine refuses (disk full, read-only folder) raises StorageError naming the
    log; a line cut short by it is removed again by the trim on resume.
    """

    def __init__(self, path: Path, active: bool) -> None:
        self.path = path
        self.active = active
        self._file: IO[str] | None = None
        if active:
            with reporting_write_errors("metrics log", path):
                path.parent.mkdir(parents=True, exist_ok=True)
                self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        with reporting_write_errors("metrics log", self.path):
            self._file.write(json.dumps(_plain({"time": time.time(), **record})) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            handle, self._file = self._file, None
            try:
                handle.close()  # flushes: may meet a full disk
            except OSError:
                pass  # the write that failed has already been reported


class Progress:
    """tqdm bar over optimiser steps (ETA from tqdm); silent when disabled or off rank 0."""

    def __init__(self, total: int, initial: int, enabled: bool, description: str) -> None:
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=description,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
            )

    def update(self, loss: float) -> None:
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class RunOutputs:
    """A run's metrics log and progress bar, each opened on first use, so that a resumed run
    cuts its log back to the checkpoint before anything is appended to it."""

    def __init__(self, path: Path, main: bool, show_progress: bool, description: str) -> None:
        self.path, self.main = path, main
        self.show_progress, self.description = show_progress and main, description
        self._log: MetricsLog | None = None
        self._progress: Progress | None = None

    def log(self) -> MetricsLog:
        """The metrics log at ``path`` (inactive off rank 0)."""
        if self._log is None:
            self._log = MetricsLog(self.path, self.main)
        return self._log

    def progress(self, total: int, initial: int) -> Progress:
        """The progress bar over ``total`` steps, starting at ``initial`` when first opened."""
        if self._progress is None:
            self._progress = Progress(total, initial, self.show_progress, self.description)
        return self._progress

    def close(self) -> None:
        """Close the progress bar, then the log (idempotent; both reopen on next use)."""
        progress, self._progress = self._progress, None
        log, self._log = self._log, None
        if progress is not None:
            progress.close()
        if log is not None:
            log.close()
