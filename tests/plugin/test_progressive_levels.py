"""Progressive slide levels: reads answer at once from decoded blocks or a coarser preview,
and blocks are decoded in the background, newest first, within a memory budget."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from napari_medvl._progressive_levels import (
    MAX_CHUNK_PX,
    BlockStore,
    block_shape,
    progressive_levels,
)


class SlowLevel:
    """An array-like level whose reads take ``delay_s`` and record the reading thread."""

    def __init__(self, pixels: np.ndarray, delay_s: float = 0.0, fail_rows: int | None = None):
        self.pixels = pixels
        self.shape = pixels.shape
        self.dtype = pixels.dtype
        self.delay_s = delay_s
        self.fail_rows = fail_rows
        self.readers: list[str] = []
        self.windows: list[tuple[int, int, int, int]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __getitem__(self, key):
        self.gate.wait(10)
        self.readers.append(threading.current_thread().name)
        rows, cols = key[0], key[1]
        self.windows.append((rows.start, rows.stop, cols.start, cols.stop))
        if self.fail_rows is not None and rows.start >= self.fail_rows:
            raise ValueError("corrupt JPEG 2000 codestream")
        time.sleep(self.delay_s)
        return self.pixels[key]


def _pyramid(delay_s: float = 0.0):
    rng = np.random.default_rng(0)
    fine = rng.integers(0, 255, (400, 600, 3), dtype=np.uint8)
    coarse = fine[1::4, 1::4].copy()  # the pixel at each 4 x 4 block's nearest centre
    return SlowLevel(fine, delay_s), SlowLevel(coarse)


def test_a_read_answers_at_once_with_the_coarser_preview_then_sharp(tmp_path):
    fine, coarse = _pyramid(delay_s=0.3)
    arrived = threading.Event()
    levels = progressive_levels(
        [fine, coarse], [(50, 50), (50, 50)], arrived.set, block_target_px=100
    )
    store = levels[0].store
    assert store.wait_idle(10)  # the coarsest level was asked for when the levels were made
    preview = levels[0][100:180, 200:330]
    assert "MainThread" not in fine.readers + coarse.readers
    rows = ((np.arange(100, 180) + 0.5) / 4).astype(int)
    cols = ((np.arange(200, 330) + 0.5) / 4).astype(int)
    np.testing.assert_array_equal(preview, coarse.pixels[rows][:, cols])
    assert store.wait_idle(10) and arrived.is_set()
    np.testing.assert_array_equal(levels[0][100:180, 200:330], fine.pixels[100:180, 200:330])
    np.testing.assert_array_equal(levels[0][100:180, 200:330, 1], fine.pixels[100:180, 200:330, 1])
    # whole blocks of one tile-aligned size were read, each once
    assert len(fine.windows) == len(set(fine.windows))
    assert fine.windows == [(100, 200, 200, 300), (100, 200, 300, 400)]  # block row 1, cols 2-3
    assert all(y1 - y0 == 100 and y0 % 100 == 0 and x0 % 100 == 0 for y0, y1, x0, _ in fine.windows)


def test_blocks_are_whole_tiles_near_the_target_size():
    assert block_shape((240, 256)) == (240, 256)  # one usual tile
    assert block_shape((240, 256), target=1024) == (960, 1024)
    assert block_shape((2048, 100)) == (2048, 200)


def test_the_newest_request_is_decoded_first():
    fine, coarse = _pyramid()
    store = BlockStore([fine, coarse], [(100, 100), (100, 100)])
    fine.gate.clear()
    store.request([(0, 0, 0)])  # the worker takes it and waits at the gate
    time.sleep(0.2)
    store.request([(0, 1, 1)])
    store.request([(0, 3, 5)])  # panned on: newest
    fine.gate.set()
    assert store.wait_idle(10)
    assert fine.windows == [(0, 100, 0, 100), (300, 400, 500, 600), (100, 200, 100, 200)]


def test_the_cache_stays_within_its_budget_and_keeps_the_recent_blocks():
    fine, coarse = _pyramid()
    block_bytes = 100 * 100 * 3
    store = BlockStore([fine, coarse], [(100, 100), (100, 100)], budget_bytes=5 * block_bytes)
    keys = [(0, row, col) for row in range(4) for col in range(6)]
    for key in keys:
        store.request([key])
        assert store.wait_idle(10)
    assert store.cached_bytes <= 5 * block_bytes
    assert store.block(keys[-1]) is not None and store.block(keys[0]) is None


def test_a_block_that_cannot_be_decoded_shows_white_and_its_error_is_kept_once():
    fine, coarse = _pyramid()
    fine.fail_rows = 200
    store = BlockStore([fine, coarse], [(100, 100), (100, 100)])
    store.request([(0, 3, 0), (0, 0, 0)])
    assert store.wait_idle(10)
    assert (store.block((0, 3, 0)) == 255).all()
    np.testing.assert_array_equal(store.block((0, 0, 0)), fine.pixels[:100, :100])
    assert "corrupt JPEG 2000" in str(store.take_error())
    assert store.take_error() is None


@pytest.mark.parametrize("key", [(slice(0, 10, 2), slice(0, 5)), (3, slice(0, 5)), Ellipsis])
def test_other_indices_read_the_level_itself(key):
    fine, coarse = _pyramid()
    fine_plain = type(
        "Plain",
        (),
        {"shape": fine.shape, "dtype": fine.dtype, "__getitem__": lambda self, k: fine.pixels[k]},
    )()
    levels = progressive_levels([fine_plain, coarse], [(50, 50), (50, 50)])
    np.testing.assert_array_equal(levels[0][key], fine.pixels[key])


def test_levels_state_their_blocks_as_chunks_so_napari_reads_whole_blocks():
    fine, coarse = _pyramid()
    levels = progressive_levels([fine, coarse], [(50, 50), (25, 25)], block_target_px=100)
    assert levels[0].chunks == (100, 100, 3) and levels[1].chunks == (100, 100, 3)
    assert levels[0].shape == (400, 600, 3) and levels[0].dtype == np.uint8


def test_a_striped_levels_chunks_stay_near_the_view_while_its_blocks_span_the_width():
    fine, coarse = _pyramid()  # 400 x 600, stored in strips of 8 whole rows (as NDPI / strip TIFF)
    levels = progressive_levels([fine, coarse], [(8, 600), (8, 150)], block_target_px=256)
    assert levels[0].store.block_shapes[0] == (256, 600)  # decoded a whole strip group at a time
    assert levels[0].chunks == (256, MAX_CHUNK_PX, 3)  # napari widens its window only this far
    levels[0][0:8, 590:600]  # noqa: B018 - asks for the first strip group
    assert levels[0].store.wait_idle(10)
    assert fine.windows == [(0, 256, 0, 600)]  # one read of whole strips
    np.testing.assert_array_equal(levels[0][0:8, 590:600], fine.pixels[0:8, 590:600])


def test_an_idle_worker_ends_so_a_closed_slides_blocks_are_freed():
    import gc
    import weakref

    fine, coarse = _pyramid()
    store = BlockStore([fine, coarse], [(100, 100), (100, 100)])
    store.idle_exit_s = 0.2
    before = set(threading.enumerate())
    store.request([(0, 0, 0)])
    (worker,) = set(threading.enumerate()) - before
    assert store.wait_idle(10)
    worker.join(5)
    assert not worker.is_alive(), "the idle worker did not end"
    store.request([(0, 1, 1)])  # a new request starts a worker again
    assert store.wait_idle(10) and store.block((0, 1, 1)) is not None
    freed = weakref.ref(store)
    del store
    deadline = time.monotonic() + 60  # a hang guard, not a speed claim
    while freed() is not None:
        assert time.monotonic() < deadline, "the store (its cache) was kept alive"
        gc.collect()
        time.sleep(0.05)
