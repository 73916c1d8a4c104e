"""Bare napari's pan beside a low-priority busy process: how much CPU contention alone costs.

The model process runs at nice 10 (``napari_medvl._worker_process.CHILD_NICENESS``) on cores
that the display's software rasteriser also draws with. This bench pans bare napari
(``bench_first_heatmap.floor_round``: a 4096 x 4096 pyramid held in memory, no plugin, three
passes along the heatmap bench's row) alone and beside one process at that niceness doing:
a pure Python loop, a one-thread matrix product loop, a loop importing torch and
transformers in fresh processes (what a model process does first), and a loop extracting the
same slide's features with the demo encoder into a fresh store (what the model process does
during a first heatmap: a reader thread decoding patches beside the encoder). Rounds alternate the
phases. Prints worst, p99 and median gaps of each phase per round, and the worst and p99
against the pan alone in the same round. Needs a display (run it under tools/with_display.sh):

    tools/with_display.sh .venv/bin/python bench/bench_floor_contention.py --rounds 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from bench_first_heatmap import floor_round, write_j2k_pyramid  # noqa: E402

PASSES = 3
BUSY = {
    "alone": None,
    "python loop": "while True: pass",
    "matrix loop": "import numpy as np\na = np.random.rand(700, 700)\nwhile True: a @ a",
    "torch imports": (
        "import subprocess, sys\n"
        "while True: subprocess.run([sys.executable, '-c', 'import torch, transformers'])"
    ),
    "extraction": (
        "import os, pathlib, tempfile\n"
        "from medvl_engine.pathology import final, prompt_heatmap\n"
        "while True:\n"
        "    with tempfile.TemporaryDirectory() as folder:\n"
        "        store = pathlib.Path(folder) / 'features.zarr'\n"
        "        final(prompt_heatmap(os.environ['MEDVL_BENCH_SLIDE'], 'tumor', 'medvl-demo',\n"
        "                             store_path=store, partials=False))"
    ),
}
"""Phase -> the busy process's Python code (None: the pan alone)."""


WARMUP_S = {"extraction": 8.0}
"""Seconds a busy process runs before the pan (1 s unless named: the extraction's model loads)."""


def _busy(code: str, niceness: int, slide_path: Path, warmup_s: float) -> subprocess.Popen:
    environment = dict(
        os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MEDVL_BENCH_SLIDE=str(slide_path)
    )
    process = subprocess.Popen(
        ["nice", "-n", str(niceness), sys.executable, "-c", code], env=environment
    )
    time.sleep(warmup_s)  # started and busy before the pan
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--niceness", type=int, default=10, help="the busy process's nice")
    arguments = parser.parse_args()
    from qtpy.QtWidgets import QApplication

    from medvl_engine.io.slide import open_slide
    from napari_medvl._slide_layers import slide_frame
    from napari_medvl._stall_probe import StallProbe

    app = QApplication.instance() or QApplication([])
    probe = StallProbe()
    with tempfile.TemporaryDirectory() as scratch:
        slide_path = write_j2k_pyramid(Path(scratch) / "j2k.svs")
        slide = open_slide(slide_path)
        levels = [np.asarray(level) for level in slide.levels]
        mpp_x, mpp_y = slide.mpp
        metadata = {"path": str(slide_path), "world_frame": slide_frame(slide.mpp).as_dict()}
        slide.close()
        print(f"bare napari pan beside a busy process at nice {arguments.niceness}")
        for index in range(arguments.rounds):
            alone: tuple[float, float] | None = None
            for name, code in BUSY.items():
                warmup_s = WARMUP_S.get(name, 1.0)
                busy = _busy(code, arguments.niceness, slide_path, warmup_s) if code else None
                try:
                    gaps = floor_round(
                        app, probe, levels, (float(mpp_y), float(mpp_x)), metadata, PASSES
                    )["pan"]
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
                worst, p99 = max(gaps), float(np.percentile(gaps, 99))
                alone = alone or (worst, p99)
                print(
                    f"  round {index + 1} {name:<13}: worst {worst:6.1f} ms, p99 {p99:6.1f} ms, "
                    f"median {np.median(gaps):5.1f} ms, {len(gaps)} ticks; against alone: "
                    f"worst {worst / alone[0]:.2f}x, p99 {p99 / alone[1]:.2f}x",
                    flush=True,
                )


if __name__ == "__main__":
    main()
