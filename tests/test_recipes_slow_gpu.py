"""Opt-in tiers: the demo recipes end to end (`--run-slow`) and on CUDA with bf16 (`gpu`).

The slow tests run the shipped demo configs exactly as a user would and assert the results the
training guide reports; the GPU tests run two optimiser steps of each model on CUDA with bf16
autocast through the same command line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from medvl_engine.cli.train import main as train_main

TRAIN = Path(__file__).resolve().parents[1] / "train"


def _limit_overrides(tmp_path: Path) -> list[str]:
    return [f"run.out_dir={tmp_path / 'run'}", f"task.synthetic_dir={tmp_path / 'data'}"]


def _topk_overrides(tmp_path: Path) -> list[str]:
    return [f"run.out_dir={tmp_path / 'run'}", "task.install_as=null", "run.progress=false"]


def _printed_metrics(text: str) -> dict[str, float]:
    found = re.findall(r"^\s+([a-z_0-9]+)\s+(-?[0-9.]+)\s*$", text, flags=re.MULTILINE)
    return {key: float(value) for key, value in found}


@pytest.mark.slow
def test_limit_demo_tuned_tower_beats_the_untuned_one(tmp_path, capsys):
    """Issue 9's bar on the test split, mean over 3 seeds, each model chosen on validation:
    tuned report-guided slide-level balanced accuracy above the untuned tower's by more than
    two bootstrap std, and patch-level zero-shot AUROC of at least 0.95."""
    config = str(TRAIN / "limit_demo.yaml")
    overrides = [*_limit_overrides(tmp_path), "run.seeds=[0,1,2]", "task.eval_robustness=false"]
    assert train_main(["limit", "--config", config, *overrides]) == 0
    assert train_main(["limit", "eval", "--config", config, *overrides]) == 0
    results = json.loads((tmp_path / "run" / "test_evaluation.json").read_text())
    summary = results["summary"]
    assert len(results["runs"]) == 3
    assert summary["tuned_minus_untuned"] > 2 * summary["bootstrap_std"]
    assert summary["gain_above_two_bootstrap_std"]
    assert summary["mean_std"]["patch tuned"]["mean"] >= 0.95


@pytest.mark.slow
def test_topksiglip_demo_is_well_above_chance(tmp_path, capsys):
    config = str(TRAIN / "topksiglip_demo.yaml")
    assert train_main(["topksiglip", "--config", config, *_topk_overrides(tmp_path)]) == 0
    metrics = _printed_metrics(capsys.readouterr().out)
    assert metrics["pointing_game"] > 2 * metrics["pointing_game_chance"]
    assert metrics["pixel_ap"] > 2 * metrics["pixel_ap_chance"]
    assert metrics["auroc_density_avg"] > 0.7
    # Zero-shot with the paper's prompts on 96 held-out breasts (an AUROC moves by ~0.06).
    assert metrics["auroc_cancer"] > 0.7
    assert metrics["auroc_birads_avg"] > 0.6
    assert metrics["auroc_findings_avg"] > 0.6


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["limit", "topksiglip"])
def test_two_bf16_steps_on_cuda(task, tmp_path):
    config = str(TRAIN / f"{task}_demo.yaml")
    overrides = _limit_overrides(tmp_path) if task == "limit" else _topk_overrides(tmp_path)
    overrides += ["run.device=cuda", "run.amp=bf16", "run.max_steps=2", "run.log_every=1"]
    assert train_main([task, "--config", config, *overrides]) == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in lines if '"loss"' in line]
    assert len(losses) >= 1 and all(loss == loss for loss in losses)  # finite, not NaN
