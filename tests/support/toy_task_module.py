"""A task module for `medvl-train` dispatch tests: the toy regression task with model folders
(`save_pretrained`) and an `eval` action that scores each seed's `best/` model.

A module, not a fixture: `medvl-train` imports it by the name registered in TASK_MODULES."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from medvl_engine.training.seeds import mean_std_over_seeds, selected_model_dirs
from tests.support.toy_task import ToyConfig, ToyModel, ToyTask

CONFIG_CLASS = ToyConfig


class SavingToyTask(ToyTask):
    def save_pretrained(self, model: torch.nn.Module, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps({"dim": self.config.dim}))
        save_file(dict(model.state_dict()), str(directory / "model.safetensors"))


def build_task(task_config: ToyConfig, run_config) -> SavingToyTask:
    return SavingToyTask(task_config)


def evaluate_saved(run_config, task_config: ToyConfig) -> int:
    """Print the mean squared error of each selected model, then mean +- std over seeds."""
    task = ToyTask(task_config)
    per_seed = []
    for seed, folder in selected_model_dirs(run_config):
        model = ToyModel(task_config.dim, 0.0)
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        model.eval()
        with torch.no_grad():
            metrics = task.evaluate(model)
        per_seed.append(metrics)
        print(f"seed {seed}: val_mse {metrics['val_mse']:.6f}")
    for key, (mean, std, count) in mean_std_over_seeds(per_seed).items():
        print(f"{key}: {mean:.6f} +- {std:.6f} over {count}")
    return 0


ACTIONS = {"eval": evaluate_saved}
