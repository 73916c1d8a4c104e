"""`medvl-train TASK [ACTION] --config F`: action dispatch, one run per seed, zero-epoch runs."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file

from medvl_engine.cli.train import main, split_action
from medvl_engine.training import registry
from medvl_engine.training.config import RunConfig
from medvl_engine.training.loop import CHECKPOINT_NAME
from medvl_engine.training.seeds import mean_std_over_seeds, seed_runs
from tests.support.toy_task import ToyConfig


@pytest.fixture
def toy_recipe(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.TASK_MODULES, "toy", "tests.support.toy_task_module")
    config = tmp_path / "toy.yaml"
    config.write_text(
        "run:\n"
        "  lr: 1.0e-2\n"
        "  epochs: 2\n"
        f"  out_dir: {tmp_path / 'runs'}\n"
        "  progress: false\n"
        "  device: cpu\n"
        "  select_metric: neg_mse\n"
        "task:\n"
        "  samples: 6\n"
        "  dropout: 0.0\n",
        encoding="utf-8",
    )
    return config, tmp_path / "runs"


def test_split_action_takes_the_first_word_without_equals():
    assert split_action([]) == ("train", [])
    assert split_action(["run.lr=1"]) == ("train", ["run.lr=1"])
    assert split_action(["eval", "run.lr=1"]) == ("eval", ["run.lr=1"])


def test_train_is_the_default_action(toy_recipe, capsys):
    config, runs = toy_recipe
    assert main(["toy", "--config", str(config)]) == 0
    assert (runs / "best" / "model.safetensors").is_file()
    assert (runs / "final" / "model.safetensors").is_file()
    assert json.loads(capsys.readouterr().out)["steps"] == 12  # 6 samples x 2 epochs


def test_seeds_train_one_run_per_seed_then_eval_reads_each_best(toy_recipe, capsys):
    config, runs = toy_recipe
    assert main(["toy", "train", "--config", str(config), "run.seeds=[3,5]"]) == 0
    weights = {}
    for seed in (3, 5):
        folder = runs / f"seed-{seed}"
        saved = torch.load(folder / CHECKPOINT_NAME, weights_only=False)["config"]
        assert saved["run"]["seed"] == seed and saved["run"]["seeds"] is None
        assert saved["run"]["out_dir"] == str(folder)
        assert saved["task"]["seed"] == seed  # data order follows the seed too
        weights[seed] = load_file(str(folder / "best" / "model.safetensors"))
    assert not (runs / "best").exists()
    assert not torch.equal(weights[3]["net.0.weight"], weights[5]["net.0.weight"])
    out = capsys.readouterr().out
    assert "seed 3: training into" in out and "seed 5: training into" in out

    assert main(["toy", "eval", "--config", str(config), "run.seeds=[3,5]"]) == 0
    out = capsys.readouterr().out
    values = [float(v) for v in re.findall(r"seed \d: val_mse ([0-9.]+)", out)]
    assert len(values) == 2
    mean = re.search(r"val_mse: ([0-9.]+) \+- ([0-9.]+) over 2", out)
    assert mean is not None
    assert float(mean.group(1)) == pytest.approx(sum(values) / 2, abs=2e-6)


def test_eval_without_a_trained_model_is_one_sentence(toy_recipe, capsys):
    config, runs = toy_recipe
    assert main(["toy", "eval", "--config", str(config), "run.seeds=[0,1]"]) == 2
    err = capsys.readouterr().err
    assert f"no saved model in {runs / 'seed-0' / 'best'}, {runs / 'seed-1' / 'best'}" in err
    assert "Traceback" not in err


def test_unknown_action_names_the_choices(toy_recipe, capsys):
    config, _ = toy_recipe
    assert main(["toy", "evl", "--config", str(config)]) == 2
    assert (
        "task 'toy' has no action 'evl'; choose one of ['eval', 'train']" in capsys.readouterr().err
    )


def test_zero_epochs_evaluates_and_saves_without_a_step(toy_recipe, capsys):
    config, runs = toy_recipe
    assert main(["toy", "--config", str(config), "run.epochs=0"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 0 and summary["best_epoch"] == 0
    log = [json.loads(line) for line in (runs / "metrics.jsonl").read_text().splitlines()]
    assert [record["event"] for record in log] == ["eval"]
    # the saved model is the initial one: torch.manual_seed(run.seed) before build_model
    torch.manual_seed(0)
    from tests.support.toy_task import ToyModel

    initial = ToyModel(4, 0.0).state_dict()
    final = load_file(str(runs / "final" / "model.safetensors"))
    assert all(torch.equal(initial[key], final[key]) for key in initial)


def test_seed_runs_without_seeds_is_the_config_itself():
    run, task = RunConfig(out_dir="x"), ToyConfig()
    (only,) = seed_runs(run, task)
    assert only.seed is None and only.run_config is run and only.task_config is task


def test_mean_std_over_seeds_skips_missing_and_non_finite_values():
    summary = mean_std_over_seeds([{"a": 1.0, "b": 2.0}, {"a": 3.0, "b": float("nan")}, {"a": 5.0}])
    assert summary["a"] == pytest.approx((3.0, (8 / 3) ** 0.5, 3))
    assert summary["b"] == (2.0, 0.0, 1)


def test_run_threads_sets_torchs_cpu_threads_and_zero_is_refused(toy_recipe, capsys):
    config, _ = toy_recipe
    before = torch.get_num_threads()
    try:
        assert main(["toy", "--config", str(config), "run.threads=1", "run.epochs=0"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    capsys.readouterr()
    assert main(["toy", "--config", str(config), "run.threads=0"]) == 2
    error = capsys.readouterr().err.strip()
    assert "run.threads" in error and len(error.splitlines()) == 1
