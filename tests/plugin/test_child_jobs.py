"""Which process runs a dock's job, and how the child's job is relayed back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from napari_medvl import _worker_process
from napari_medvl._child_jobs import LoadedElsewhere, model_process_for, relay


@pytest.fixture
def the_process(monkeypatch):
    process = object()
    asked = []

    def model_process(cancel=None):
        asked.append(cancel)
        return process

    monkeypatch.setattr(_worker_process, "model_process", model_process)
    return process, asked


def test_a_job_goes_to_the_model_process_unless_its_model_or_slide_is_only_here(
    the_process, tmp_path
):
    process, asked = the_process
    on_disk = tmp_path / "slide.svs"
    on_disk.write_bytes(b"x")
    slide = SimpleNamespace(path=on_disk)
    cancel = object()
    assert model_process_for(None, slide, cancel) is process  # not loaded yet
    assert model_process_for(LoadedElsewhere("plip"), slide) is process
    assert model_process_for(LoadedElsewhere("topk"), None) is process  # views go as data
    assert asked == [cancel, None, None]
    assert model_process_for(object(), slide) is None  # a model loaded here (the demo's)
    assert model_process_for(None, SimpleNamespace(path=tmp_path / "gone.svs")) is None
    assert model_process_for(None, SimpleNamespace(path="in memory")) is None
    assert len(asked) == 3  # no process was started for those


def test_relay_converts_each_item_returns_the_result_and_closing_it_closes_the_child_job():
    closed = []

    def child():
        try:
            yield 1
            yield 2
            return "done"
        finally:
            closed.append(True)

    relayed = relay(child(), lambda item: item * 10)
    assert next(relayed) == 10
    assert next(relayed) == 20
    with pytest.raises(StopIteration) as finished:
        next(relayed)
    assert finished.value.value == "done"
    assert closed == [True]

    closed.clear()
    relayed = relay(child())
    assert next(relayed) == 1  # unchanged without a conversion
    relayed.close()  # the dock's job closed (cancelled): the child's job is closed with it
    assert closed == [True]
