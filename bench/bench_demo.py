"""`make demo` on a fresh install: the demo end to end, headless and under a virtual display.

Each path runs as its own process, with an empty model cache, no network and a new output
folder, exactly as a user's first `make demo` after installation:
  headless  `medvl demo --out DIR`                               (the files only)
  viewer    `tools/with_display.sh napari-medvl-demo --out DIR`  (files + napari viewers,
            screenshotted under Xvfb; skipped when no display can be had)
Prints for each: the wall time, the CPU time the process used (user + system, children
included) and their ratio (wall / CPU: about 1 on a quiet machine, above 1 when other work
competes for the cores, below 1 when both cores are busy for the demo), and the demo's own
per-stage timings line.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(argv: list[str], out: Path, cache: Path) -> tuple[float, float, str, int]:
    env = {
        **os.environ,
        "MEDVL_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    completed = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    timings = next(
        (line for line in completed.stdout.splitlines() if "timings:" in line), "(no timings)"
    )
    if completed.returncode != 0:
        print(completed.stdout[-2000:], completed.stderr[-2000:], file=sys.stderr)
    return wall, cpu, timings, completed.returncode


def main() -> int:
    paths = {
        "headless": lambda out: [str(BIN / "medvl"), "demo", "--out", str(out)],
        "viewer": lambda out: [
            str(ROOT / "tools" / "with_display.sh"),
            str(BIN / "napari-medvl-demo"),
            "--out",
            str(out),
        ],
    }
    status = 0
    with tempfile.TemporaryDirectory(prefix="medvl-bench-demo-") as folder:
        for name, argv in paths.items():
            cache, out = Path(folder) / f"cache-{name}", Path(folder) / f"out-{name}"
            cache.mkdir()
            wall, cpu, timings, code = _run(argv(out), out, cache)
            status = status or code
            print(
                f"{name:<9} wall {wall:6.1f} s  cpu {cpu:6.1f} s  wall/cpu {wall / cpu:4.2f}  "
                f"exit {code}"
            )
            print(f"          {timings.strip()}")
    return status


if __name__ == "__main__":
    sys.exit(main())
