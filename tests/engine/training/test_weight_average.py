"""The moving average of the weights (run.ema_decay): its equation, and the loop evaluating,
checkpointing and resuming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from medvl_engine.errors import ConfigError
from medvl_engine.training import RunConfig, load_checkpoint, train
from medvl_engine.training._weight_average import WeightAverage, average_decay
from tests.support.toy_task import ToyConfig, ToyModel, ToyTask


def test_decay_warms_up_then_holds():
    assert average_decay(1, 0.99) == pytest.approx(2 / 11)
    assert average_decay(10, 0.99) == pytest.approx(11 / 20)
    assert average_decay(10_000, 0.99) == 0.99


def test_update_follows_the_equation_for_parameters_and_buffers():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[0].bias.requires_grad_(False)  # frozen: never averaged
    average = WeightAverage(model, decay=0.5)
    start = model[0].weight.detach().clone()
    with torch.no_grad():
        model[0].weight.add_(1.0)
        model[0].bias.add_(5.0)
        model[1].running_mean.fill_(4.0)
        model[1].num_batches_tracked.fill_(7)
    average.update(step=100)  # d = min(0.5, 101 / 110) = 0.5
    averaged = average.model
    assert torch.allclose(averaged[0].weight, start + 0.5)
    assert torch.allclose(averaged[0].bias, model[0].bias - 5.0)
    assert torch.allclose(averaged[1].running_mean, torch.full((2,), 2.0))
    assert int(averaged[1].num_batches_tracked) == 7
    average.update(step=1)  # d = 2 / 11: mostly the trained weights
    assert torch.allclose(averaged[0].weight, (start + 0.5) * 2 / 11 + (start + 1.0) * 9 / 11)
    assert not any(p.requires_grad for p in averaged.parameters())


def _run(tmp_path: Path, **overrides) -> RunConfig:
    values = dict(lr=3e-2, epochs=3, out_dir=str(tmp_path / "run"), progress=False, seed=3)
    values.update(overrides)
    return RunConfig(**values)


def _evaluate_state(state: dict) -> float:
    task = ToyTask(ToyConfig())
    model = ToyModel(task.config.dim, task.config.dropout)
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        return task.evaluate(model)["val_mse"]


def test_the_loop_evaluates_and_checkpoints_the_average(tmp_path):
    summary = train(ToyTask(ToyConfig()), _run(tmp_path, ema_decay=0.9))
    payload = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    last = summary["evaluations"][-1]["val_mse"]
    assert last == pytest.approx(_evaluate_state(payload["ema"]))
    assert last != pytest.approx(_evaluate_state(payload["model"]))
    for key, value in payload["model"].items():
        if value.is_floating_point():
            assert not torch.equal(value, payload["ema"][key])


def test_resume_continues_the_same_average(tmp_path):
    straight = train(ToyTask(ToyConfig()), _run(tmp_path / "a", ema_decay=0.9))
    train(ToyTask(ToyConfig()), _run(tmp_path / "b", ema_decay=0.9, stop_at_step=17))
    resumed = train(ToyTask(ToyConfig()), _run(tmp_path / "b", ema_decay=0.9, resume="auto"))
    assert resumed["steps"] == straight["steps"]
    final_a = load_checkpoint(tmp_path / "a" / "run" / "checkpoint.pt")["ema"]
    final_b = load_checkpoint(tmp_path / "b" / "run" / "checkpoint.pt")["ema"]
    for key in final_a:
        assert torch.equal(final_a[key], final_b[key])


def test_bad_decay_and_a_checkpoint_without_average_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"run.ema_decay must be in \(0, 1\), got 1.5"):
        _run(tmp_path, ema_decay=1.5)
    train(ToyTask(ToyConfig()), _run(tmp_path, stop_at_step=5))
    with pytest.raises(ConfigError, match="holds no weight average"):
        train(ToyTask(ToyConfig()), _run(tmp_path, ema_decay=0.9, resume="auto"))
