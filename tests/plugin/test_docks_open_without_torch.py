"""Opening a dock never imports torch or transformers on the GUI thread.

Importing torch and transformers takes 2 - 7 s on a 2-core machine; a dock that did so while
opening froze the viewer that long (the TopK dock read its model's candidate count through
the torch model module, the classification dock its class presets through the torch
classification module). Each dock opens in a fresh interpreter (tools/dock_open_probe.py),
where nothing has imported them yet, and every ``import`` of them that the GUI thread runs
while the dock is imported, built, docked and its first event-loop turns run is recorded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "tools" / "dock_open_probe.py"


def _manifest_docks() -> dict[str, str]:
    """The plugin's docks, display name -> ``module:Class``, as the probe reads the manifest."""
    spec = importlib.util.spec_from_file_location("dock_open_probe", PROBE)
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe.manifest_docks()


DOCKS = _manifest_docks()


@pytest.mark.parametrize("dock", sorted(DOCKS))
def test_opening_a_dock_imports_no_torch_on_the_gui_thread(dock, tmp_path):
    environment = {**os.environ, "MEDVL_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(PROBE), DOCKS[dock]],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the {dock} dock did not open:\n{done.stderr[-2000:]}"
    report = json.loads(lines[-1])
    assert report["imports"] == [], (
        f"opening the {dock} dock imported {report['imports']} on the GUI thread "
        f"({report['opened_ms']:.0f} ms)"
    )
    assert report["opened_ms"] < 2000.0
