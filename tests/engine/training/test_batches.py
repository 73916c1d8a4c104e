"""DataLoader workers in the shared loop: same batches as the in-process path, exact resume,
failed batches as one sentence, no worker left behind, data/step time in metrics.jsonl."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from medvl_engine.errors import ConfigError, DataError
from medvl_engine.training import RunConfig, load_config, train
from medvl_engine.training._batches import WorkerBatches, uses_workers
from tests.support.loader_toy_task import LoaderToyConfig, LoaderToyTask


def _run(path: Path, **overrides) -> RunConfig:
    values = dict(lr=1e-2, epochs=2, out_dir=str(path), progress=False, seed=3)
    values.update(overrides)
    return RunConfig(**values)


def _assert_same_batches(expected: list[dict], got: list[dict]) -> None:
    assert len(got) == len(expected)
    for one, other in zip(expected, got, strict=True):
        assert one.keys() == other.keys()
        for key, value in one.items():
            if isinstance(value, torch.Tensor):
                assert value.dtype == other[key].dtype and torch.equal(value, other[key]), key
            else:
                assert value == other[key], key


def _loaded_in_workers(task, config: RunConfig, cases: list[tuple[int, int]]) -> list[list[dict]]:
    """Batches of each (epoch, start) case, from one set of persistent workers."""
    loader = WorkerBatches(task, config, 0, 1, torch.device("cpu"))
    try:
        return [
            list(loader.epoch(epoch, start, task.num_batches(epoch, 0, 1)))
            for epoch, start in cases
        ]
    finally:
        loader.close()


# -- the two real tasks: batches in workers equal the in-process batches --------------------------
@pytest.fixture(scope="module")
def topk_task(tmp_path_factory, tiny_topk_values):
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.task import build_task

    root = tmp_path_factory.mktemp("topk-loader")
    task_config = TopKSigLIPTaskConfig(
        **tiny_topk_values(tau_anneal_steps=4, context_length=200),
        synthetic_train=6,
        synthetic_eval=2,
        synthetic_size=[192, 128],
        synthetic_dir=str(root / "synthetic"),
        batch_size=2,
        report_shuffle=True,
    )
    run = RunConfig(lr=1e-3, epochs=2, out_dir=str(root / "run"), progress=False)
    task = build_task(task_config, run)
    task.build_model()
    return task


@pytest.fixture(scope="module")
def limit_task(tmp_path_factory, tiny_tower, write_feature_store):
    from medvl_engine.tasks.limit.task import LimitTask, LimitTaskConfig

    root = tmp_path_factory.mktemp("limit-loader")
    tiny_tower(root / "bert", out_dim=None)
    rng = np.random.default_rng(0)
    rows = []
    for index in range(10):
        features = rng.normal(size=(int(rng.integers(4, 12)), 16))
        write_feature_store(root / f"s{index}.zarr", features, slide=f"s{index}")
        rows.append(
            {
                "slide_id": f"s{index}",
                "organ": "lung" if index % 2 else "breast",
                "report": f"invasive carcinoma {index}" if index % 3 else "adipose tissue",
                "features": f"s{index}.zarr",
                "split": "train",
                "label": "a",
            }
        )
    (root / "manifest.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    task_config = LimitTaskConfig(
        manifest=str(root / "manifest.jsonl"), text_model=str(root / "bert"), num_negatives=2
    )
    run = RunConfig(lr=1e-3, epochs=2, out_dir=str(root / "run"), progress=False, seed=1)
    task = LimitTask(task_config, run)
    task.build_model()
    return task


@pytest.mark.parametrize("task_fixture", ["topk_task", "limit_task"])
def test_two_workers_load_the_same_batches_as_the_training_process(task_fixture, request):
    task = request.getfixturevalue(task_fixture)
    config = _run(Path("unused"), num_workers=2)
    assert uses_workers(task, config) and not uses_workers(task, _run(Path("unused")))
    cases = [(0, 0), (1, 0), (1, 1)]  # start > 0: where a resumed run picks up
    for (epoch, start), loaded in zip(cases, _loaded_in_workers(task, config, cases), strict=True):
        in_process = list(task.train_batches(epoch, 0, 1, start))
        assert len(in_process) == task.num_batches(epoch, 0, 1) - start > 0
        _assert_same_batches(in_process, loaded)
    # the epochs differ (the test would pass vacuously on a constant loader otherwise)
    first, second = next(iter(task.train_batches(0, 0, 1))), next(iter(task.train_batches(1, 0, 1)))
    key = "images" if "images" in first else "features"
    assert first[key].shape != second[key].shape or not torch.equal(first[key], second[key])


def test_a_worker_copy_of_a_task_carries_no_decoded_data(topk_task, limit_task):
    from medvl_engine.features.bags import BagCache

    for index in range(len(topk_task.train_set)):
        topk_task.train_set.breast(index)  # fill the in-memory cache of decoded breasts
    assert len(topk_task.train_set._cache) == len(topk_task.train_set)
    decoded = sum(image.nbytes for image, _ in topk_task.train_set._cache.values())
    pickled = pickle.dumps(topk_task)
    assert len(pickled) < decoded / 4
    copy = pickle.loads(pickled)
    assert copy.train_set._cache == {}
    torch.testing.assert_close(
        copy.train_set.sample(2, 1).image, topk_task.train_set.sample(2, 1).image
    )

    cache = BagCache(4)
    path = limit_task.splits["train"][0].features
    bag = cache.get(path)
    restored = pickle.loads(pickle.dumps(cache))
    assert len(pickle.dumps(cache)) < bag.numel() * bag.element_size()
    assert torch.equal(restored.get(path), bag)


# -- the loop with workers ------------------------------------------------------------------------
def test_loop_with_workers_trains_like_the_training_process_and_resumes_exactly(
    tmp_path, process_gone
):
    straight = train(LoaderToyTask(LoaderToyConfig()), _run(tmp_path / "a", epochs=3, grad_accum=2))
    in_workers = LoaderToyTask(LoaderToyConfig())
    with_workers = train(in_workers, _run(tmp_path / "b", epochs=3, grad_accum=2, num_workers=2))
    assert with_workers["losses"] == straight["losses"]  # bit-identical
    assert len(in_workers.loader_pids) >= 1 and os_pid() not in in_workers.loader_pids

    # stopped in the middle of epoch 1 (step 9 of 18), resumed with workers
    first = train(
        LoaderToyTask(LoaderToyConfig()),
        _run(tmp_path / "c", epochs=3, grad_accum=2, num_workers=2, stop_at_step=9),
    )
    assert first["stopped_early"] and first["steps"] == 9
    resumed_task = LoaderToyTask(LoaderToyConfig())
    second = train(
        resumed_task,
        _run(tmp_path / "c", epochs=3, grad_accum=2, num_workers=2, resume="auto"),
    )
    assert second["steps"] == 18
    assert first["losses"] + second["losses"] == straight["losses"]
    deadline = time.time() + 10
    while not all(process_gone(pid) for pid in resumed_task.loader_pids) and time.time() < deadline:
        time.sleep(0.1)
    assert all(process_gone(pid) for pid in in_workers.loader_pids | resumed_task.loader_pids)


def os_pid() -> int:
    import os

    return os.getpid()


def test_topk_training_with_workers_gives_the_losses_of_the_training_process(
    tmp_path, tiny_topk_values
):
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.task import build_task

    def run(workers: int, **overrides) -> dict:
        task_config = TopKSigLIPTaskConfig(
            **tiny_topk_values(tau_anneal_steps=4, context_length=200),
            synthetic_train=6,
            synthetic_eval=0,  # no evaluation: this test is about the training batches
            synthetic_size=[192, 128],
            synthetic_dir=str(tmp_path / "synthetic"),
            batch_size=2,
            report_shuffle=True,
        )
        config = _run(tmp_path / f"run{workers}", lr=1e-3, num_workers=workers, **overrides)
        return train(build_task(task_config, config), config)

    in_process = run(0)
    assert in_process["steps"] == 6
    stopped = run(2, stop_at_step=4)  # stops after batch 1 of epoch 1
    resumed = run(2, resume="auto")
    assert stopped["losses"] + resumed["losses"] == in_process["losses"]


def test_a_batch_that_fails_in_a_worker_is_one_sentence_naming_it_and_no_worker_is_left(
    tmp_path, process_gone
):
    task = LoaderToyTask(LoaderToyConfig(fail_at=7))
    started = time.time()
    with pytest.raises(DataError) as caught:
        train(task, _run(tmp_path, num_workers=2))
    assert time.time() - started < 60
    message = caught.value.message
    assert message.startswith("task loader-toy: batch 7 of epoch 0 (rank 0) could not be loaded")
    assert "OSError: sample7.h5 is truncated (second line of detail)" in message
    assert "\n" not in message and "Traceback" not in message
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics if r["event"] == "step"] == list(range(1, 8))
    assert task.loader_pids
    deadline = time.time() + 10
    while not all(process_gone(pid) for pid in task.loader_pids) and time.time() < deadline:
        time.sleep(0.1)
    assert all(process_gone(pid) for pid in task.loader_pids)


def test_a_worker_killed_while_loading_is_one_sentence_not_a_hang(tmp_path):
    task = LoaderToyTask(LoaderToyConfig(kill_at=5))
    started = time.time()
    with pytest.raises(DataError) as caught:
        train(task, _run(tmp_path, num_workers=2))
    assert time.time() - started < 60
    message = caught.value.message
    assert message.startswith("task loader-toy: batch ") and "of epoch 0 (rank 0)" in message
    assert "DataLoader worker stopped" in message and "run.num_workers=0" in message
    assert "\n" not in message


def test_a_task_that_cannot_be_sent_to_workers_is_a_config_error(tmp_path):
    task = LoaderToyTask(LoaderToyConfig())
    task.progress = lambda text: None  # a local function does not pickle
    with pytest.raises(
        ConfigError, match="cannot be sent to DataLoader worker processes.*run.num_workers=0"
    ):
        train(task, _run(tmp_path, num_workers=1))


def test_metrics_log_data_wait_and_step_time(tmp_path):
    config = LoaderToyConfig(samples=4, load_delay_s=0.05, step_delay_s=0.02)
    train(LoaderToyTask(config), _run(tmp_path, epochs=1))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["event"] == "step"]
    assert len(steps) == 4
    for record in steps:
        assert 0.05 <= record["data_s"] < record["step_s"]
        assert record["step_s"] >= record["data_s"] + 0.02


def test_loader_settings_are_checked(tmp_path):
    run, _ = load_config(None, ["run.num_workers=2", "run.prefetch_factor=4", "run.pin_memory=on"])
    assert (run.num_workers, run.prefetch_factor, run.pin_memory) == (2, 4, True)
    assert load_config(None, [])[0].pin_memory == "auto"
    assert load_config(None, [])[0].num_workers == 0
    with pytest.raises(ConfigError, match="run.num_workers must be between 0 and 256, got -1"):
        load_config(None, ["run.num_workers=-1"])
    with pytest.raises(ConfigError, match="run.pin_memory"):
        load_config(None, ["run.pin_memory=sometimes"])
    loader = WorkerBatches(LoaderToyTask(LoaderToyConfig()), run, 0, 1, torch.device("cpu"))
    assert loader.pin_memory() is True
    auto = RunConfig(num_workers=2)
    assert (
        WorkerBatches(
            LoaderToyTask(LoaderToyConfig()), auto, 0, 1, torch.device("cpu")
        ).pin_memory()
        is False
    )
