"""Open one napari-medvl dock in this fresh interpreter and print what it cost, as JSON.

    python -m napari_medvl._dock_probe napari_medvl._topk_widget:TopKWidget [--warm]

Imports the dock's module, builds the dock, docks it in a new viewer and runs 200 ms of the
event loop, recording every ``import`` of torch or transformers that the GUI thread runs
meanwhile. Prints ``{"imports": [...], "opened_ms": ...}``: the heavy packages the GUI thread
imported and the milliseconds from importing the dock's module to its being docked. With
``--warm`` torch and transformers are imported before the viewer opens, so their import
costs nothing at the dock (the reference for a dock that imports nothing heavy).
``manifest_docks`` lists the docks the plugin's manifest contributes. Used by
tests/plugin/test_docks_open_without_torch.py and bench/bench_dock_open.py.
"""

from __future__ import annotations

import builtins
import importlib
import json
import sys
import threading
import time
from pathlib import Path

HEAVY = ("torch", "transformers")
MANIFEST = Path(__file__).resolve().parent / "napari.yaml"


def manifest_docks() -> dict[str, str]:
    """The widgets of the plugin's manifest: display name -> ``module:Class``."""
    import yaml

    contributions = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))["contributions"]
    python_names = {command["id"]: command["python_name"] for command in contributions["commands"]}
    return {
        widget["display_name"]: python_names[widget["command"]]
        for widget in contributions["widgets"]
    }


def main(argv: list[str]) -> None:
    target = argv[0]
    if "--warm" in argv:
        for name in HEAVY:
            importlib.import_module(name)
    import napari
    from qtpy.QtWidgets import QApplication

    module_name, class_name = target.split(":")
    viewer = napari.Viewer(show=False)
    app = QApplication.instance()
    assert app is not None  # napari.Viewer made it
    app.processEvents()
    seen: list[str] = []
    original_import = builtins.__import__

    def recording_import(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        top = name.split(".")[0]
        if top in HEAVY and threading.current_thread() is threading.main_thread():
            seen.append(top)
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
    viewer.close()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main(sys.argv[1:])
