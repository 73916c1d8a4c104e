"""Event-loop stall probe: a 10 ms QTimer that records the gaps between its ticks.

While the GUI thread is free the timer fires every ~10 ms; any work that holds the thread
(decoding tiles, building layers) shows up as a longer gap. Used by the tests and by
``bench/bench_plugin_stalls.py``; the gaps are in milliseconds.
"""

from __future__ import annotations

import time

import numpy as np
from qtpy.QtCore import QObject, QTimer

__all__ = ["StallProbe"]

TICK_MS = 10


class StallProbe(QObject):
    """Start, let the GUI work, stop; then ``worst_ms`` and ``percentile_ms(99)`` of the gaps.

    A gap is the time between two ticks minus nothing: an idle loop gives gaps of about
    ``TICK_MS``. Usable as a context manager.
    """

    def __init__(self, tick_ms: int = TICK_MS) -> None:
        super().__init__()
        self._timer = QTimer(self)
        self._timer.setInterval(tick_ms)
        self._timer.timeout.connect(self._tick)
        self._last: float | None = None
        self.gaps_ms: list[float] = []
        self.ends_s: list[float] = []  # when each gap ended (time.perf_counter)

    def start(self) -> StallProbe:
        self.gaps_ms, self.ends_s = [], []
        self._last = time.perf_counter()
        self._timer.start()
        return self

    def stop(self) -> StallProbe:
        self._timer.stop()
        self._tick()  # the gap up to now counts too (a stall at the very end)
        self._last = None
        return self

    def _tick(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.gaps_ms.append((now - self._last) * 1e3)
            self.ends_s.append(now)
        self._last = now

    def __enter__(self) -> StallProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def worst_ms(self) -> float:
        return max(self.gaps_ms) if self.gaps_ms else 0.0

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.gaps_ms, q)) if self.gaps_ms else 0.0

    def summary(self) -> str:
        return (
            f"worst {self.worst_ms:7.1f} ms, p99 {self.percentile_ms(99):6.1f} ms, "
            f"{len(self.gaps_ms)} ticks"
        )
