"""Opt-in tiers: the demo recipes end to end (`--run-slow`) and on CUDA with bf16 (`gpu`).

The slow tests run the shipped demo configs exactly as a user would and assert the results the
training guide reports; the GPU tests run two optimiser steps of each model on CUDA with bf16
autocast through the same command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvl_engine.cli.train import main as train_main

TRAIN = Path(__file__).resolve().parents[2] / "train"


def _limit_overrides(tmp_path: Path) -> list[str]:
    return [f"run.out_dir={tmp_path / 'run'}", f"task.synthetic_dir={tmp_path / 'data'}"]


def _topk_overrides(tmp_path: Path) -> list[str]:
    return [f"run.out_dir={tmp_path / 'run'}", "task.install_as=null", "run.progress=false"]


@pytest.mark.slow
def test_limit_demo_tuned_tower_beats_the_untuned_one(tmp_path, capsys):
    """On the test split, mean over 3 seeds, each model chosen on validation: tuned
    report-guided slide-level balanced accuracy above the untuned tower's (the gain and its
    paired bootstrap over the 12 diagnoses are reported; two bootstrap std at that unit is
    more than this demo's gain), and patch-level zero-shot AUROC of at least 0.95."""
    config = str(TRAIN / "limit_demo.yaml")
    overrides = [*_limit_overrides(tmp_path), "run.seeds=[0,1,2]", "task.eval_robustness=false"]
    assert train_main(["limit", "--config", config, *overrides]) == 0
    assert train_main(["limit", "eval", "--config", config, *overrides]) == 0
    results = json.loads((tmp_path / "run" / "test_evaluation.json").read_text())
    summary = results["summary"]
    assert len(results["runs"]) == 3
    # every slide of a diagnosis gets one prediction: the independent unit is the diagnosis
    assert summary["bootstrap_unit"] == {"unit": "diagnosis", "n_units": 12}
    assert summary["tuned_minus_untuned"] > 0
    assert summary["gain_above_two_bootstrap_std"] == (
        summary["tuned_minus_untuned"] > 2 * summary["bootstrap_std"]
    )
    assert summary["mean_std"]["patch tuned"]["mean"] >= 0.95


@pytest.mark.slow
def test_topksiglip_demo_meets_the_test_split_bar(tmp_path):
    """Issue 9's bar on the test split, mean over 3 seeds, each model chosen on validation:
    cancer AUROC >= 0.85 and Pointing Game >= 0.80, each above the best trivial baseline
    (intensity statistics; the max-intensity map) on the same breasts."""
    config = str(TRAIN / "topksiglip_demo.yaml")
    overrides = [*_topk_overrides(tmp_path), "run.seeds=[0,1,2]"]
    assert train_main(["topksiglip", "--config", config, *overrides]) == 0
    assert train_main(["topksiglip", "eval", "--config", config, *overrides]) == 0
    results = json.loads((tmp_path / "run" / "test_evaluation.json").read_text())
    assert len(results["models"]) == 3
    over_seeds, baseline = results["mean_std_over_seeds"], results["baseline"]["metrics"]
    for key, bar in (("auroc_cancer", 0.85), ("pointing_game", 0.80)):
        assert over_seeds[key]["mean"] >= bar, (key, over_seeds[key])
        assert over_seeds[key]["mean"] > baseline[key]["value"], (key, baseline[key])


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["limit", "topksiglip"])
def test_two_bf16_steps_on_cuda(task, tmp_path):
    config = str(TRAIN / f"{task}_demo.yaml")
    overrides = _limit_overrides(tmp_path) if task == "limit" else _topk_overrides(tmp_path)
    overrides += ["run.device=cuda", "run.amp=bf16", "run.max_steps=2", "run.log_every=1"]
    if task == "topksiglip":  # the recipe pretrains for 2000 + 1500 steps before its first step
        overrides += ["task.lesion_pretrain_steps=2", "task.scorer_pretrain_steps=2"]
    assert train_main([task, "--config", config, *overrides]) == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in lines if '"loss"' in line]
    assert len(losses) >= 1 and all(loss == loss for loss in losses)  # finite, not NaN
