"""What the GUI thread was doing in the event loop's longest gaps: a stack sampler for benches.

A daemon thread samples the GUI thread's Python stack every few milliseconds
(``sys._current_frames``) while the StallProbe runs; the probe's ticks, recorded as they fire,
mark the gaps. For the longest gaps, ``report`` prints the gap and the stacks sampled inside it,
most frequent first, as their innermost frames (file:line function). A frame in C code (a GL
draw, a texture upload) shows as the Python frame that called it. The sampler takes the GIL
for a moment per sample: a bench run with it is for finding causes, not for its ratios.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path

__all__ = ["GapStacks", "add_arguments", "from_arguments"]


def _frame_name(frame) -> str:
    code = frame.f_code
    if code.co_filename.startswith("<frozen importlib"):
        return "[import]"  # the import machinery's frames, folded into one
    return f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}"


class GapStacks:
    """Start with the probe, stop with it, then :meth:`report` (lines to print)."""

    def __init__(self, probe, interval_s: float = 0.003, depth: int = 24) -> None:
        self._probe = probe
        self.focus: str | None = None  # stacks naming it are reported whole
        self._interval_s = interval_s
        self._depth = depth
        self._gui_thread = threading.get_ident()
        self._ticks: list[float] = []
        self._samples: list[tuple[float, tuple[str, ...]]] = []
        self._running = threading.Event()
        self._thread: threading.Thread | None = None
        probe._timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        if self._running.is_set():
            self._ticks.append(time.perf_counter())

    def _sample(self) -> None:
        while self._running.is_set():
            frame = sys._current_frames().get(self._gui_thread)
            stack: list[str] = []
            while frame is not None and len(stack) < self._depth:
                name = _frame_name(frame)
                if not stack or name != stack[-1]:
                    stack.append(name)
                frame = frame.f_back
            self._samples.append((time.perf_counter(), tuple(stack)))
            time.sleep(self._interval_s)

    def start(self) -> None:
        self._ticks, self._samples = [time.perf_counter()], []
        self._running.set()
        self._thread = threading.Thread(target=self._sample, name="gap stacks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._ticks.append(time.perf_counter())
        self._running.clear()
        if self._thread is not None:
            self._thread.join()

    def report(
        self, gaps: int = 8, stacks: int = 3, frames: int = 7, focus: str | None = None
    ) -> list[str]:
        """The ``gaps`` longest gaps, each with its ``stacks`` most sampled stacks (innermost
        ``frames`` frames, innermost first; every frame of a stack that names ``focus``) and
        their share of the gap's samples."""
        spans = sorted(zip(self._ticks, self._ticks[1:], strict=False), key=lambda s: s[0] - s[1])[
            :gaps
        ]
        lines = []
        for begin, end in spans:
            inside = [
                stack if focus is not None and focus in " ".join(stack) else stack[:frames]
                for t, stack in self._samples
                if begin < t < end
            ]
            lines.append(f"gap {(end - begin) * 1e3:6.1f} ms ({len(inside)} samples)")
            for stack, count in Counter(inside).most_common(stacks):
                lines.append(f"  {count / max(len(inside), 1):4.0%}  " + " <- ".join(stack))
        return lines


def add_arguments(parser, phase: str) -> None:
    """``--stacks`` and ``--stacks-focus`` for a bench whose sampled phase is ``phase``."""
    parser.add_argument(
        "--stacks",
        action="store_true",
        help=f"print what the GUI thread did in the {phase}'s longest gaps (slows it)",
    )
    parser.add_argument("--stacks-focus", help="print every frame of stacks naming this")


def from_arguments(arguments, probe) -> GapStacks | None:
    """A GapStacks on ``probe`` when ``--stacks`` was given, else None."""
    if not arguments.stacks:
        return None
    stacks = GapStacks(probe)
    stacks.focus = arguments.stacks_focus
    return stacks
