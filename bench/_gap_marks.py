"""Which of a phase's long gaps held a given piece of the plugin's work.

``mark_heatmap_work`` timestamps, on the GUI thread, each new map in a heatmap dock's image
layer and each progress report the dock shows, and in any thread of napari's process each
garbage collection of the older generations (1 and 2: the whole process waits for it), and
samples every 100 ms the CPU time the model process has used; ``attribute`` counts the gaps
over a threshold during which one of them happened (a gap is the time between two ticks of
the stall probe, which ends at ``ends_s``) and the cores the model process kept busy around
them.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from typing import Any

import numpy as np

LABELS = {
    "map": "a map display",
    "fill": "a result layer fill",
    "progress": "a progress report",
    "gc": "a garbage collection",
    "slide": "a refresh for decoded slide blocks",
    "reslice": "a napari re-slice of the slide",
}
"""What each kind of mark is, as ``attribute`` names it."""
_SAMPLING = threading.Event()  # set while the model process's CPU time is sampled


def mark_heatmap_work(viewer: Any, widget: Any) -> dict[str, list[float]]:
    """Timestamps (``time.perf_counter``) of the dock's map displays and progress reports."""
    marks: dict[str, list[float]] = {"map": [], "slide": [], "reslice": []}
    for layer in viewer.layers:
        if layer.metadata.get("overlay_key") and type(layer).__name__ == "Image":
            layer.events.data.connect(lambda _event: marks["map"].append(time.perf_counter()))
        if layer.metadata.get("slide") is not None:  # refreshed as decoded blocks arrive
            refresh = layer.refresh

            def refreshed(*args: Any, _refresh: Any = refresh, **kwargs: Any) -> Any:
                caller = sys._getframe(1).f_code
                by_blocks = caller.co_filename.endswith("_slide_display.py")
                marks["slide" if by_blocks else "reslice"].append(time.perf_counter())
                return _refresh(*args, **kwargs)

            layer.refresh = refreshed
    _mark_jobs(marks, widget)
    return marks


def mark_topk_work(widget: Any) -> dict[str, list[float]]:
    """Timestamps of the TopK dock's result layer fills (one per event-loop turn) and
    progress reports, garbage collections and the model process's CPU time."""
    marks: dict[str, list[Any]] = {"fill": [], "fill_ms": [], "fill_name": []}
    presenter = widget.presenter
    fill_next = presenter._fill_next_layer

    def fill() -> None:
        queued = len(presenter._queued)
        name = presenter._queued[0][1]["name"] if queued else "nothing queued"
        marks["fill"].append(time.perf_counter())
        fill_next()
        marks["fill_ms"].append((time.perf_counter() - marks["fill"][-1]) * 1e3)
        shown_only = queued and len(presenter._queued) == queued  # its pending layer shown
        marks["fill_name"].append(f"{name} shown" if shown_only else f"{name} filled")

    presenter._fill_next_layer = fill
    _mark_jobs(marks, widget)
    return marks


def _mark_jobs(marks: dict[str, list[float]], widget: Any) -> None:
    shown = widget.runner.after_progress
    marks["progress"] = []

    def progress(report: Any) -> None:
        marks["progress"].append(time.perf_counter())
        if shown is not None:
            shown(report)

    widget.runner.after_progress = progress
    started: list[float] = []

    def collection(phase: str, info: dict[str, int]) -> None:
        if info["generation"] < 1:
            return
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            marks["gc"].append(started[0])  # a span: its start and its end
            marks["gc_end"].append(time.perf_counter())

    marks["gc"], marks["gc_end"] = [], []
    gc.callbacks.append(collection)
    marks["cpu_at"], marks["cpu_s"] = [], []
    _SAMPLING.set()
    threading.Thread(target=_sample_model_cpu, args=(marks,), daemon=True).start()


def _sample_model_cpu(marks: dict[str, list[float]]) -> None:
    from napari_medvl import _worker_process

    ticks = os.sysconf("SC_CLK_TCK")
    while _SAMPLING.is_set():
        process = getattr(_worker_process, "_shared", None)
        pid = getattr(process, "pid", None)
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            used = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        except (OSError, ValueError, IndexError):
            used = None
        if used is not None:
            marks["cpu_at"].append(time.perf_counter())
            marks["cpu_s"].append(used)
        time.sleep(0.1)


def fill_costs(gaps_ms: list[float], ends_s: list[float], marks: dict[str, list[Any]]) -> str:
    """``importance CC filled 12 ms (gap 60 ms), ...``: the GUI thread's time in each turn of
    the result's fill (a pending layer shown, a layer filled) and the probe's gap that held
    it (the turn and, often, the draw it asked for)."""
    said = []
    for at, cost, name in zip(marks["fill"], marks["fill_ms"], marks["fill_name"], strict=True):
        held = [
            gap for gap, end in zip(gaps_ms, ends_s, strict=True) if end - gap / 1e3 <= at <= end
        ]
        role = " ".join(name.split(" ")[-3:])
        said.append(
            f"{role} {cost:.0f} ms (gap {held[0]:.0f} ms)" if held else f"{role} {cost:.0f} ms"
        )
    return ", ".join(said)


def stop_marking() -> None:
    """Stop timing garbage collections and sampling the model process (``mark_heatmap_work``)."""
    gc.callbacks[:] = [c for c in gc.callbacks if getattr(c, "__name__", "") != "collection"]
    _SAMPLING.clear()


def model_cores(marks: dict[str, list[float]], start: float, end: float) -> float | None:
    """Cores the model process kept busy from ``start`` to ``end``, between the samples
    nearest outside them (within the process's life); None without two samples."""
    at, used = marks.get("cpu_at", []), marks.get("cpu_s", [])
    if len(at) < 2:
        return None
    first = max([i for i, t in enumerate(at) if t <= start] or [0])
    last = min([i for i, t in enumerate(at) if t >= end] or [len(at) - 1])
    span = at[last] - at[first]
    return (used[last] - used[first]) / span if span > 0 else None


def attribute(
    gaps_ms: list[float], ends_s: list[float], marks: dict[str, list[float]], threshold_ms: float
) -> str:
    """``long gaps N: a map display in M, a progress report in P, neither in R``."""
    long_gaps = [
        (end - gap / 1e3, end)
        for gap, end in zip(gaps_ms, ends_s, strict=True)
        if gap > threshold_ms
    ]

    def holds(kind: str, start: float, end: float) -> bool:
        if kind == "gc":
            spans = zip(marks["gc"], marks["gc_end"], strict=True)
            return any(a <= end and b >= start for a, b in spans)
        return any(start <= mark <= end for mark in marks.get(kind, []))

    kinds = [kind for kind in LABELS if kind in marks]
    counts = {kind: sum(holds(kind, *span) for span in long_gaps) for kind in kinds}
    none = sum(not any(holds(kind, *span) for kind in kinds) for span in long_gaps)
    collected_ms = sum(b - a for a, b in zip(marks["gc"], marks["gc_end"], strict=True)) * 1e3
    start = ends_s[0] - gaps_ms[0] / 1e3 if ends_s else 0.0
    when = ", ".join(f"{end - start:.1f}" for _, end in long_gaps)
    around = [model_cores(marks, a - 0.25, b + 0.25) for a, b in long_gaps]
    busy = [cores for cores in around if cores is not None]
    overall = model_cores(marks, start, ends_s[-1]) if ends_s else None
    cpu = (
        f"; the model process kept {np.mean(busy):.2f} cores busy around them, "
        f"{overall:.2f} over the phase"
        if busy and overall is not None
        else ""
    )
    held = ", ".join(f"{LABELS[kind]} in {counts[kind]}" for kind in kinds)
    seen = ", ".join(f"{LABELS[kind].split(' ', 1)[1]}: {len(marks[kind])}" for kind in kinds)
    return (
        f"gaps over {threshold_ms:.0f} ms: {len(long_gaps)} (ending {when} s into the phase); "
        f"{held}, none of these in {none} ({seen}; {collected_ms:.0f} ms collecting){cpu}"
    )
