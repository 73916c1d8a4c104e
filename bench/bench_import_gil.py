"""How long a background import holds the main thread off the GIL, side by side in one run.

The docks import torch, transformers and pandas in background threads so that the GUI thread
never runs an import itself. A thread still shares the GIL: while it runs C code that keeps
the GIL (an extension module's initialisation), the GUI thread cannot run Python, so a Qt
event loop with Python callbacks stalls. Each module is imported in a fresh interpreter, in
a background thread, while the main thread runs a 1 ms sleep loop; the longest gap of that
loop is the longest stretch the import held the GIL (plus one 1 ms tick). Prints the worst
and second-worst gaps per module and the ratio of torch's worst gap to the idle loop's.
"""

from __future__ import annotations

import subprocess
import sys

MODULES = ("torch", "transformers", "pandas")

PROBE = """
import sys, threading, time

def gaps_while(action):
    worker = threading.Thread(target=action)
    gaps, last = [], time.perf_counter()
    worker.start()
    while worker.is_alive():
        time.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    gaps.sort()
    return gaps[-1] * 1e3, gaps[-2] * 1e3 if len(gaps) > 1 else 0.0

name = sys.argv[1]
if name == "idle":
    worst, second = gaps_while(lambda: time.sleep(1.0))
else:
    worst, second = gaps_while(lambda: __import__(name))
print(f"{worst:.1f} {second:.1f}")
"""


def longest_gaps(module: str) -> tuple[float, float]:
    """(worst, second-worst) main-loop gap in ms while ``module`` is imported in a thread of a
    fresh interpreter ("idle": a thread that only sleeps)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=True
    )
    worst, second = (float(value) for value in done.stdout.split())
    return worst, second


def main() -> None:
    idle = longest_gaps("idle")
    print(f"{'idle thread':<19}: worst {idle[0]:7.1f} ms, second {idle[1]:7.1f} ms")
    results = {}
    for module in MODULES:
        results[module] = longest_gaps(module)
        worst, second = results[module]
        print(f"import {module:<12}: worst {worst:7.1f} ms, second {second:7.1f} ms")
    ratio = results["torch"][0] / idle[0]
    print(f"ratio worst gap, torch import / idle thread: {ratio:6.1f}x")


if __name__ == "__main__":
    main()
