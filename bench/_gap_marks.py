"""Which of a phase's long gaps held a given piece of the plugin's work.

``mark_heatmap_work`` timestamps, on the GUI thread, each new map in a heatmap dock's image
layer and each progress report the dock shows, and in any thread of napari's process each
garbage collection of the older generations (1 and 2: the whole process waits for it);
``attribute`` counts the gaps over a threshold during which one of them happened (a gap is
the time between two ticks of the stall probe, which ends at ``ends_s``).
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any


def mark_heatmap_work(viewer: Any, widget: Any) -> dict[str, list[float]]:
    """Timestamps (``time.perf_counter``) of the dock's map displays and progress reports."""
    marks: dict[str, list[float]] = {"map": [], "progress": [], "slide": [], "reslice": []}
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
    shown = widget.runner.after_progress

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
    return marks


def stop_marking() -> None:
    """Stop timing garbage collections (``mark_heatmap_work`` started)."""
    gc.callbacks[:] = [c for c in gc.callbacks if getattr(c, "__name__", "") != "collection"]


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

    kinds = ("map", "progress", "gc", "slide", "reslice")
    counts = {kind: sum(holds(kind, *span) for span in long_gaps) for kind in kinds}
    none = sum(not any(holds(kind, *span) for kind in kinds) for span in long_gaps)
    collected_ms = sum(b - a for a, b in zip(marks["gc"], marks["gc_end"], strict=True)) * 1e3
    start = ends_s[0] - gaps_ms[0] / 1e3 if ends_s else 0.0
    when = ", ".join(f"{end - start:.1f}" for _, end in long_gaps)
    return (
        f"gaps over {threshold_ms:.0f} ms: {len(long_gaps)} (ending {when} s into the phase); "
        f"a map display in {counts['map']}, "
        f"a progress report in {counts['progress']}, a garbage collection in {counts['gc']}, "
        f"a refresh for decoded slide blocks in {counts['slide']}, napari re-slicing the slide "
        f"in {counts['reslice']}, none of these in {none} ({len(marks['map'])} maps, "
        f"{len(marks['progress'])} progress reports, {len(marks['slide'])} block refreshes, "
        f"{len(marks['reslice'])} re-slices; {len(marks['gc'])} collections, "
        f"{collected_ms:.0f} ms)"
    )
