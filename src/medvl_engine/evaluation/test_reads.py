"""How often a run folder's test split was read: ``<out_dir>/test_reads.json``.

Every evaluation that scores the test split adds one read (with what was scored), so each report
can say how often the test split has been looked at; a figure from a split read many times is
partly chosen on it. Reports that read only validation or fresh cohorts leave the count as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medvl_engine.common.atomic import atomic_write

__all__ = ["TEST_READS_FILE", "count_test_read", "read_count"]

TEST_READS_FILE = "test_reads.json"


def read_count(out_dir: str | Path) -> int:
    """Reads of the test split recorded in ``out_dir`` so far (0 without a record)."""
    return int(_state(Path(out_dir) / TEST_READS_FILE)["test_split_reads"])


def _state(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = {"test_split_reads": 0, "reads": []}
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return state
        if isinstance(loaded, dict):
            state["test_split_reads"] = int(loaded.get("test_split_reads", 0))
            state["reads"] = list(loaded.get("reads", []))
    return state


def count_test_read(out_dir: str | Path, what: str) -> int:
    """Add one read of the test split (``what``: e.g. the models scored) to
    ``out_dir/test_reads.json`` (written atomically); return the count so far."""
    path = Path(out_dir) / TEST_READS_FILE
    state = _state(path)
    state["test_split_reads"] += 1
    state["reads"].append(what)
    text = json.dumps(state, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(
        path, lambda target: target.write_text(text, encoding="utf-8"), what="test-split read count"
    )
    return int(state["test_split_reads"])
