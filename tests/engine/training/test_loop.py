"""The shared training loop: steps, schedule, accumulation, NaN guard, checkpoints, exact resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from medvl_engine.errors import CorruptFileError
from medvl_engine.training import (
    RunConfig,
    TrainingDivergedError,
    load_checkpoint,
    lr_factor,
    train,
)
from tests.support.toy_task import ToyConfig, ToyTask


def _run(tmp_path: Path, **overrides) -> RunConfig:
    values = dict(lr=1e-2, epochs=2, out_dir=str(tmp_path / "run"), progress=False, seed=3)
    values.update(overrides)
    return RunConfig(**values)


def test_training_reduces_loss_and_writes_metrics_and_checkpoint(tmp_path):
    config = _run(tmp_path, epochs=4, lr=3e-2, select_metric="val_mse", select_mode="min")
    summary = train(ToyTask(ToyConfig()), config)
    assert summary["steps"] == 4 * 12
    assert len(summary["losses"]) == 48
    first, last = summary["evaluations"][0]["val_mse"], summary["evaluations"][-1]["val_mse"]
    assert last < first
    assert [e["epoch"] for e in summary["evaluations"]] == [0, 1, 2, 3]
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [r for r in records if r["event"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 49))
    assert {"lr", "grad_norm", "loss", "abs_error"} <= set(steps[0])
    payload = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert payload["loop"]["step"] == 48 and payload["loop"]["epoch"] == 4
    assert payload["config"]["run"]["lr"] == pytest.approx(3e-2)
    assert payload["config"]["task"]["samples"] == 12
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "run").iterdir())


def test_cosine_schedule_with_warmup_values():
    factors = [lr_factor(s, 10, 2, "cosine", 0.0) for s in range(10)]
    assert factors[0] == pytest.approx(0.5) and factors[1] == pytest.approx(1.0)
    assert factors[2] == pytest.approx(1.0)
    assert factors[6] == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert all(a >= b for a, b in zip(factors[2:], factors[3:], strict=False))
    assert lr_factor(5, 10, 0, "constant", 0.0) == 1.0


def test_lr_follows_schedule_in_metrics(tmp_path):
    config = _run(tmp_path, epochs=1, warmup_steps=3, lr=1e-3)
    train(ToyTask(ToyConfig()), config)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    lrs = [json.loads(line)["lr"] for line in lines if '"step"' in line and '"lr"' in line]
    # the lr logged after step s is the one for step s+1
    expected = [1e-3 * lr_factor(s + 1, 12, 3, "cosine", 0.0) for s in range(12)]
    assert lrs == pytest.approx(expected)


def test_gradient_accumulation_counts_optimizer_steps(tmp_path):
    summary = train(ToyTask(ToyConfig(samples=10)), _run(tmp_path, epochs=1, grad_accum=4))
    assert summary["steps"] == 3  # 4 + 4 + 2 micro-batches


def test_exact_resume_gives_identical_losses(tmp_path):
    task_config = ToyConfig()
    straight = train(ToyTask(task_config), _run(tmp_path / "a", epochs=3, grad_accum=2))
    total = straight["steps"]
    assert total == 18
    first = train(
        ToyTask(task_config), _run(tmp_path / "b", epochs=3, grad_accum=2, stop_at_step=7)
    )
    assert first["stopped_early"] and first["steps"] == 7
    second = train(
        ToyTask(task_config), _run(tmp_path / "b", epochs=3, grad_accum=2, resume="auto")
    )
    assert second["steps"] == total
    assert first["losses"] + second["losses"] == straight["losses"]  # bit-identical
    final_a = load_checkpoint(tmp_path / "a" / "run" / "checkpoint.pt")["model"]
    final_b = load_checkpoint(tmp_path / "b" / "run" / "checkpoint.pt")["model"]
    for key in final_a:
        assert torch.equal(final_a[key], final_b[key])


def test_nan_guard_skips_steps_and_stops_after_limit(tmp_path):
    task = ToyTask(ToyConfig(nan_batches=(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)))
    with pytest.raises(TrainingDivergedError, match="max_bad_steps=3"):
        train(task, _run(tmp_path, max_bad_steps=3))
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r.get("skipped")] == [1, 2, 3]


def test_nan_guard_leaves_weights_finite_and_training_continues(tmp_path):
    task = ToyTask(ToyConfig(nan_batches=(5,)))
    summary = train(task, _run(tmp_path, epochs=1, max_bad_steps=5))
    assert summary["bad_steps"] == 1 and summary["steps"] == 12
    assert sum(math.isnan(x) for x in summary["losses"]) == 1
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["model"]
    assert all(torch.isfinite(v).all() for v in state.values())


def test_damaged_checkpoint_is_a_clear_error(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CorruptFileError, match="checkpoint.pt cannot be read"):
        train(ToyTask(ToyConfig()), _run(tmp_path, resume="auto"))


class _CrashAfter(ToyTask):
    """A ToyTask whose process 'dies' (an exception out of the loop) at a given step."""

    def __init__(self, config: ToyConfig, crash_at_call: int) -> None:
        super().__init__(config)
        self.calls = 0
        self.crash_at_call = crash_at_call

    def compute_losses(self, model, batch):
        self.calls += 1
        if self.calls == self.crash_at_call:
            raise RuntimeError("killed")
        return super().compute_losses(model, batch)


def _logged(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_resume_logs_every_step_and_evaluation_once(tmp_path):
    straight = train(ToyTask(ToyConfig()), _run(tmp_path / "a", epochs=3))
    # checkpoints every 5 steps; the run dies in step 19, after steps 16-18 were logged
    crashing = _CrashAfter(ToyConfig(), crash_at_call=19)
    with pytest.raises(RuntimeError, match="killed"):
        train(crashing, _run(tmp_path / "b", epochs=3, ckpt_every=5))
    run_dir = tmp_path / "b" / "run"
    assert load_checkpoint(run_dir / "checkpoint.pt")["loop"]["step"] == 15
    assert [r["step"] for r in _logged(run_dir) if r["event"] == "step"][-1] == 18
    with (run_dir / "metrics.jsonl").open("a") as log:
        log.write('{"event": "step", "step": 19, "lo')  # killed in the middle of a line

    resumed = train(ToyTask(ToyConfig()), _run(tmp_path / "b", epochs=3, resume="auto"))
    assert resumed["steps"] == straight["steps"] == 36
    records = _logged(run_dir)
    assert [r["step"] for r in records if r["event"] == "step"] == list(range(1, 37))
    assert [r["epoch"] for r in records if r["event"] == "eval"] == [0, 1, 2]
    expected = [r["loss"] for r in _logged(tmp_path / "a" / "run") if r["event"] == "step"]
    assert [r["loss"] for r in records if r["event"] == "step"] == expected


def test_resume_drops_an_evaluation_logged_after_its_checkpoint(tmp_path, monkeypatch):
    # 12 steps per epoch, a checkpoint every 12 steps: the step-12 checkpoint is saved, then the
    # epoch-0 evaluation is logged, then the run dies while saving the epoch-end checkpoint
    import medvl_engine.training.loop as loop

    saves = []

    def save_then_die(path, payload):
        saves.append(payload["loop"]["step"])
        if len(saves) == 2:
            raise RuntimeError("killed")
        return real_save(path, payload)

    real_save = loop.save_checkpoint
    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)
    with pytest.raises(RuntimeError, match="killed"):
        train(ToyTask(ToyConfig()), _run(tmp_path, epochs=2, ckpt_every=12))
    assert saves == [12, 12]
    assert [r["event"] for r in _logged(tmp_path / "run")][-1] == "eval"
    monkeypatch.setattr(loop, "save_checkpoint", real_save)

    train(ToyTask(ToyConfig()), _run(tmp_path, epochs=2, ckpt_every=12, resume="auto"))
    records = _logged(tmp_path / "run")
    assert [r["step"] for r in records if r["event"] == "step"] == list(range(1, 25))
    assert [(r["epoch"], r["step"]) for r in records if r["event"] == "eval"] == [(0, 12), (1, 24)]


def test_trainer_methods_drive_a_run_by_hand_like_train(tmp_path):
    from medvl_engine.training import Trainer
    from medvl_engine.training.distributed import init_distributed

    straight = train(ToyTask(ToyConfig()), _run(tmp_path / "a", epochs=1, grad_accum=2))
    task = ToyTask(ToyConfig())
    with Trainer(
        task, _run(tmp_path / "b", epochs=1, grad_accum=2), init_distributed("cpu")
    ) as trainer:
        assert trainer.resume() is False  # run.resume is unset
        trainer.train_model.train()
        batches = iter(task.train_batches(0, 0, 1))
        records = [trainer.step(batches, 2) for _ in range(6)]
        assert [r["step"] for r in records] == list(range(1, 7))
        assert trainer.state.batch_in_epoch == 12
        metrics = trainer.evaluate()
        trainer.checkpoint()
    assert [r["loss"] for r in records] == straight["losses"]  # bit-identical
    assert metrics == {
        k: v for k, v in straight["evaluations"][0].items() if k not in ("epoch", "step")
    }
    saved = load_checkpoint(tmp_path / "b" / "run" / "checkpoint.pt")
    assert saved["loop"]["step"] == 6 and saved["loop"]["batch_in_epoch"] == 12
    with pytest.raises(ValueError, match="at least one micro-batch"):
        trainer.step([])
