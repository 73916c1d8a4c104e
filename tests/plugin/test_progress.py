"""Engine calls with a progress callback become cancellable generators of Progress."""

from __future__ import annotations

import threading
import time

import pytest

from medvl_engine.errors import CancelledError, DataError
from napari_medvl._progress import Progress, run_with_progress


def _count(n, progress, delay=0.0):
    for i in range(1, n + 1):
        time.sleep(delay)
        progress(i, n)
    return n * 10


def _drain(generator):
    reports = []
    while True:
        try:
            reports.append(next(generator))
        except StopIteration as stop:
            return reports, stop.value


def test_reports_progress_in_order_and_returns_the_result():
    reports, result = _drain(run_with_progress("features", _count, 5))
    assert result == 50
    counted = [(r.done, r.total) for r in reports if r.done]
    assert counted == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    assert reports[0] == Progress("features")


def test_engine_errors_reach_the_caller():
    def broken(progress):
        raise DataError("store.zarr has no features: extract them again.")

    with pytest.raises(DataError, match="extract them again"):
        _drain(run_with_progress("features", broken))


def test_closing_the_generator_cancels_the_call_at_its_next_report():
    stopped = threading.Event()

    def endless(progress):
        try:
            i = 0
            while True:
                i += 1
                time.sleep(0.01)
                progress(i, 0)
        except CancelledError:
            stopped.set()
            raise

    generator = run_with_progress("features", endless)
    for _ in range(3):
        next(generator)
    generator.close()
    assert stopped.wait(2.0)


def test_a_cancel_event_stops_the_generator_and_the_call():
    cancel = threading.Event()
    calls = []

    def slow(progress):
        for i in range(1000):
            time.sleep(0.01)
            calls.append(i)
            progress(i, 1000)

    generator = run_with_progress("features", slow, cancel=cancel)
    next(generator)
    next(generator)
    cancel.set()
    with pytest.raises(CancelledError, match="features was cancelled"):
        _drain(generator)
    seen = len(calls)
    time.sleep(0.1)
    assert len(calls) <= seen + 1 < 1000
