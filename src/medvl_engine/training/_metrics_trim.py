"""Cut a run's ``metrics.jsonl`` back to what it held when a checkpoint was saved.

A run stopped after its last checkpoint has logged steps (and evaluations) that the resumed
run does again; without the cut they would appear twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["metrics_size", "trim_metrics_log"]


def metrics_size(path: Path) -> int | None:
    """Bytes in the metrics log at ``path`` now (None when there is none)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def trim_metrics_log(path: Path, step: int, size_at_checkpoint: int | None) -> int:
    """Keep the longest leading run of complete records of ``path`` that were written before
    the checkpoint: within its first ``size_at_checkpoint`` bytes (when known) and with a
    ``step`` of at most ``step``; cut the file after them. Returns the number of records kept.

    A partial last line (the process was killed while writing it) is cut as well.
    """
    if not path.is_file():
        return 0
    kept_bytes = 0
    kept = 0
    with path.open("rb") as handle:
        for line in handle:
            end = kept_bytes + len(line)
            if not line.endswith(b"\n"):
                break
            if size_at_checkpoint is not None and end > size_at_checkpoint:
                break
            try:
                record = json.loads(line)
            except ValueError:
                break
            if not isinstance(record, dict):
                break
            record_step = record.get("step")
            if isinstance(record_step, int) and record_step > step:
                break
            kept_bytes, kept = end, kept + 1
    if kept_bytes < path.stat().st_size:
        os.truncate(path, kept_bytes)
    return kept
