"""Opening a dock never imports torch or transformers on the GUI thread.

Importing torch and transformers takes 2 - 7 s on a 2-core machine; a dock that did so while
opening froze the viewer that long (the TopK dock read its model's candidate count through
the torch model module, the classification dock its class presets through the torch
classification module). Each dock opens in a fresh interpreter (napari_medvl._dock_probe),
where nothing has imported them yet, and every ``import`` of them that the GUI thread runs
while the dock is imported, built, docked and its first event-loop turns run is recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from napari_medvl._dock_probe import manifest_docks

DOCKS = manifest_docks()


@pytest.mark.parametrize("dock", sorted(DOCKS))
def test_opening_a_dock_imports_no_torch_on_the_gui_thread(dock, tmp_path):
    environment = {**os.environ, "MEDVL_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "napari_medvl._dock_probe", DOCKS[dock]],
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
