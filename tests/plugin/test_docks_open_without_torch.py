"""Opening a dock never imports torch or transformers on the GUI thread.

Importing torch and transformers takes 2 - 7 s on a 2-core machine; a dock that did so while
opening froze the viewer that long (the TopK dock read its model's candidate count through
the torch model module, the classification dock its class presets through the torch
classification module). Each dock opens in a fresh interpreter, where nothing has imported
them yet, and every ``import`` statement the GUI thread runs while the dock is built, docked
and its first event-loop turns run is recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DOCKS = {
    "heatmap": "napari_medvl._heatmap_widget:HeatmapWidget",
    "TopK": "napari_medvl._topk_widget:TopKWidget",
    "classification": "napari_medvl._classify_widget:ClassifyWidget",
    "export": "napari_medvl._export_widget:ExportWidget",
}

_PROBE = """
import builtins, importlib, json, sys, threading, time
module_name, class_name = sys.argv[1].split(":")
import napari
from qtpy.QtWidgets import QApplication
viewer = napari.Viewer(show=False)
app = QApplication.instance()
app.processEvents()
heavy = ("torch", "transformers")
seen = []
original_import = builtins.__import__

def recording_import(name, *args, **kwargs):
    if name.split(".")[0] in heavy and threading.current_thread() is threading.main_thread():
        seen.append(name.split(".")[0])
    return original_import(name, *args, **kwargs)

builtins.__import__ = recording_import
started = time.perf_counter()
dock = getattr(importlib.import_module(module_name), class_name)(viewer)
viewer.window.add_dock_widget(dock, name=class_name)
opened_ms = (time.perf_counter() - started) * 1e3
for _ in range(10):
    app.processEvents()
    time.sleep(0.02)
builtins.__import__ = original_import
print(json.dumps({"imports": sorted(set(seen)), "opened_ms": opened_ms}))
viewer.close()
"""


@pytest.mark.parametrize("dock", sorted(DOCKS))
def test_opening_a_dock_imports_no_torch_on_the_gui_thread(dock, tmp_path):
    environment = {**os.environ, "MEDVL_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, DOCKS[dock]],
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
