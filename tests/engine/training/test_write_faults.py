"""Training when the machine refuses writes: checkpoints, the metrics log and the run folder.

A full disk or a read-only folder is one sentence naming the file; the last complete
checkpoint is kept, no temporary file is left, and resuming once space is back ends with the
same weights as an uninterrupted run.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from medvl_engine.errors import StorageError
from medvl_engine.training import RunConfig, load_checkpoint, save_checkpoint, train
from medvl_engine.training._metrics_log import MetricsLog
from tests.support.toy_task import ToyConfig, ToyTask
from tests.support.write_faults import failing_writes, leftovers


def _run(folder: Path, **overrides) -> RunConfig:
    values = dict(lr=1e-2, epochs=3, out_dir=str(folder / "run"), progress=False, seed=3)
    values.update(overrides)
    return RunConfig(**values)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """(final weights of an uninterrupted run, bytes it wrote)."""
    folder = tmp_path_factory.mktemp("straight")
    with failing_writes(folder, after_bytes=2**40) as state:
        train(ToyTask(ToyConfig()), _run(folder))
    return load_checkpoint(folder / "run" / "checkpoint.pt")["model"], state.written


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_disk_full_during_training_then_resume_gives_the_same_weights(tmp_path, straight, share):
    weights, total_bytes = straight
    with failing_writes(tmp_path, errno.ENOSPC, after_bytes=int(share * total_bytes)) as state:
        with pytest.raises(StorageError) as caught:
            train(ToyTask(ToyConfig()), _run(tmp_path))
    assert state.failures >= 1
    message = str(caught.value)
    assert message.startswith("could not write ")
    assert "checkpoint.pt" in message or "metrics.jsonl" in message
    assert f"the disk holding {tmp_path / 'run'} is full (No space left on device)" in message
    assert "\n" not in message
    assert leftovers(tmp_path) == []
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    if checkpoint.exists():
        load_checkpoint(checkpoint)  # the last complete one, never a half-written file

    train(ToyTask(ToyConfig()), _run(tmp_path, resume="auto"))
    resumed = load_checkpoint(checkpoint)["model"]
    for key in weights:
        assert torch.equal(resumed[key], weights[key]), key


def test_checkpoint_on_a_full_disk_keeps_the_previous_one(tmp_path):
    path = tmp_path / "ckpt" / "checkpoint.pt"
    save_checkpoint(path, {"step": 1, "w": torch.zeros(3)})
    with failing_writes(tmp_path, errno.ENOSPC, after_bytes=100):
        with pytest.raises(StorageError, match=r"could not write checkpoint .*checkpoint\.pt: the"):
            save_checkpoint(path, {"step": 2, "w": torch.ones(10_000)})
    assert load_checkpoint(path)["step"] == 1
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EROFS, "is on a read-only file system (Read-only file system); choose a writable"),
        (errno.EACCES, "is read-only for this user (Permission denied); choose a folder you can"),
    ],
)
def test_read_only_run_folder_is_one_sentence(tmp_path, code, words):
    with failing_writes(tmp_path, code):
        with pytest.raises(StorageError) as caught:
            train(ToyTask(ToyConfig()), _run(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"could not write run folder {tmp_path / 'run'}: {tmp_path} ")
    assert words in message
    assert list(tmp_path.iterdir()) == []


def test_run_folder_that_is_a_file_is_one_sentence(tmp_path):
    blocker = tmp_path / "run"
    blocker.write_text("notes")
    with pytest.raises(StorageError, match=r"run is in the way: it is a file, not a folder"):
        train(ToyTask(ToyConfig()), _run(tmp_path))
    assert blocker.read_text() == "notes"


def test_metrics_log_on_a_read_only_folder_is_one_sentence(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    with failing_writes(folder, errno.EROFS):
        with pytest.raises(StorageError, match=r"could not write metrics log .*metrics\.jsonl: "):
            MetricsLog(folder / "metrics.jsonl", active=True)


def test_metrics_log_on_a_full_disk_is_one_sentence(tmp_path):
    with failing_writes(tmp_path, errno.ENOSPC, after_bytes=0):
        log = MetricsLog(tmp_path / "metrics.jsonl", active=True)
        with pytest.raises(StorageError, match=r"metrics\.jsonl: the disk holding .* is full"):
            log.write({"event": "step", "step": 1, "loss": 0.5})
    log.close()  # the buffered line is dropped quietly: its error was already reported


@pytest.fixture
def toy_recipe(tmp_path, monkeypatch):
    from medvl_engine.training import registry

    monkeypatch.setitem(registry.TASK_MODULES, "toy", "tests.support.toy_task_module")
    config = tmp_path / "toy.yaml"
    config.write_text(
        "run:\n  lr: 1.0e-2\n  epochs: 2\n"
        f"  out_dir: {tmp_path / 'disk' / 'runs'}\n"
        "  progress: false\n  device: cpu\n  select_metric: neg_mse\n"
        "task:\n  samples: 6\n  dropout: 0.0\n",
        encoding="utf-8",
    )
    (tmp_path / "disk").mkdir()
    return config, tmp_path / "disk"


@pytest.mark.parametrize("share", [0.2, 0.6, 0.95])
def test_medvl_train_on_a_full_disk_exits_2_with_one_sentence(toy_recipe, capsys, share):
    from medvl_engine.cli.train import main

    config, disk = toy_recipe
    with failing_writes(disk, after_bytes=2**40) as counting:
        assert main(["toy", "--config", str(config)]) == 0
    for child in sorted(disk.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    capsys.readouterr()
    with failing_writes(disk, errno.ENOSPC, after_bytes=int(share * counting.written)):
        assert main(["toy", "--config", str(config)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "could not write " in err[0] and "is full (No space left on device)" in err[0]
    assert leftovers(disk) == []
    assert main(["toy", "--config", str(config), "run.resume=auto"]) == 0
    assert (disk / "runs" / "final" / "model.safetensors").is_file()
