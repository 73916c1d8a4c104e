"""Opening each napari-medvl dock in a fresh viewer: cold (nothing heavy imported yet, as
when a user first opens it) vs warm (torch and transformers imported before the viewer),
side by side in one run.

Each open runs napari_medvl._dock_probe in a fresh interpreter: the dock's module imported,
the dock built and docked. A dock that imported torch on the GUI thread while opening would
take seconds cold and tens of milliseconds warm; one that imports nothing heavy opens in
about the same time either way. Prints per dock the median of ``REPEATS`` opens cold and
warm, their ratio, and what the GUI thread imported. Needs a display (tools/with_display.sh).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from napari_medvl._dock_probe import manifest_docks

DOCKS = manifest_docks()
REPEATS = 3


def _open(target: str, warm: bool, cache: str) -> dict:
    argv = [sys.executable, "-m", "napari_medvl._dock_probe", target, *(["--warm"] if warm else [])]
    environment = {**os.environ, "MEDVL_CACHE": cache, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=environment)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{target} did not open:\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    cache = tempfile.mkdtemp()
    print(f"{'dock':22s} {'cold ms':>9s} {'warm ms':>9s} {'cold/warm':>9s}  GUI-thread imports")
    for name, target in DOCKS.items():
        cold, warm, imports = [], [], set()
        for _ in range(REPEATS):
            report = _open(target, False, cache)
            cold.append(report["opened_ms"])
            imports.update(report["imports"])
            warm.append(_open(target, True, cache)["opened_ms"])
        cold_ms, warm_ms = statistics.median(cold), statistics.median(warm)
        print(
            f"{name:22s} {cold_ms:9.0f} {warm_ms:9.0f} {cold_ms / warm_ms:9.2f}  "
            f"{', '.join(sorted(imports)) or 'none'}"
        )


if __name__ == "__main__":
    main()
