"""Shared decoding helpers: parallel work sharing, chunk grids, RGB conversion."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from medvl_engine.io.slide.pixel_sources import (
    chunk_grid,
    decode_pool,
    decode_workers,
    for_each_in_parallel,
    to_rgb,
)


def test_every_item_is_handled_exactly_once():
    seen, lock = [], threading.Lock()

    def record(item):
        with lock:
            seen.append(item)

    for_each_in_parallel(record, list(range(200)))
    assert sorted(seen) == list(range(200))


def test_the_caller_finishes_alone_when_the_pool_is_busy():
    release = threading.Event()
    blockers = [decode_pool().submit(release.wait) for _ in range(decode_workers())]
    try:
        done = []
        finisher = threading.Thread(
            target=for_each_in_parallel, args=(done.append, list(range(50)))
        )
        finisher.start()
        finisher.join(timeout=60)  # a hang guard, not a speed claim
        assert not finisher.is_alive(), "the caller waited for pool threads that never started"
        assert sorted(done) == list(range(50))
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()


def test_first_error_reaches_the_caller():
    def fail_on_seven(item):
        if item == 7:
            raise ValueError("tile 7 is damaged")

    with pytest.raises(ValueError, match="tile 7 is damaged"):
        for_each_in_parallel(fail_on_seven, list(range(20)))


def test_chunk_grid_holds_whole_tiles():
    assert chunk_grid(10000, 240) == (4080, 4080, 1840)
    assert chunk_grid(100, 512) == (100,)
    assert chunk_grid(4864, 8) == (4096, 768)


def test_to_rgb_composites_alpha_over_white():
    rgba = np.array([[[200, 100, 0, 255], [200, 100, 0, 0], [0, 0, 0, 128]]], np.uint8)
    assert to_rgb(rgba).tolist() == [[[200, 100, 0], [255, 255, 255], [127, 127, 127]]]
    assert to_rgb(np.array([[5, 9]], np.uint8)).tolist() == [[[5, 5, 5], [9, 9, 9]]]


def test_serial_decoding_keeps_a_reads_tiles_on_the_calling_thread_only():
    from medvl_engine.io.slide.pixel_sources import (
        decode_workers,
        for_each_in_parallel,
        serial_decoding,
    )

    names: list[str] = []
    with serial_decoding():
        assert decode_workers() == 1
        for_each_in_parallel(lambda _: names.append(threading.current_thread().name), range(8))
    assert set(names) == {threading.current_thread().name} and len(names) == 8
    assert decode_workers() >= 2  # outside the context: the pool again
