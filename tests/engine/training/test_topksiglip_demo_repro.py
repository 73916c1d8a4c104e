"""A short run of the TopKSigLIP demo recipe with 1 and with 2 torch threads.

Both runs read the same synthetic cohort and draw every random number from seeded generators,
so only the order of floating-point reductions inside torch's kernels may differ between
thread counts. The test measures how far the trained parameters and the validation metrics
move and asserts the bound stated in train/README_topksiglip.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

RUN = """
import copy, json, sys
import numpy as np, torch
torch.set_num_threads(int(sys.argv[3]))
from medvl_engine.tasks.topksiglip import demo_recipe as demo
from medvl_engine.training.loop import train
from medvl_engine.tasks.topksiglip.task import build_task
recipe = demo.demo_config()
recipe["task"] = demo.flat_task_settings(recipe)
recipe["run"].update(epochs=5, warmup_steps=2, log_every=5)
recipe["task"].update(
    synthetic_train=16, synthetic_eval=8, synthetic_test=0, synthetic_size=[160, 112],
    batch_size=4, vision_depths=[1, 1, 1, 1], vision_hidden_sizes=[8, 16, 32, 64],
    image_size=128, grid=4, k=2, embed_dim=16, lesion_pretrain_steps=10, scorer_pretrain_steps=0,
    synthetic_dir=sys.argv[2],
)
demo.demo_config = lambda: copy.deepcopy(recipe)
run_config, task_config = demo.build_recipe(sys.argv[1])
task = build_task(task_config, run_config)
train(task, run_config)
from medvl_engine.models.topksiglip_folder import load_topksiglip
model = load_topksiglip(sys.argv[1] + "/final")
state = {
    k: v.float().numpy() for k, v in model.state_dict().items() if not k.startswith("text_model.")
}
np.savez(sys.argv[1] + "/params.npz", **state)
with open(sys.argv[1] + "/metrics.json", "w") as f:
    json.dump(task.last_metrics, f)
"""

PARAMETER_BOUND = 5e-3
"""Largest parameter difference allowed after 10 + 20 steps between 1 and 2 threads (measured:
1.9e-3; torch's CPU kernels reduce in a thread-count-dependent order, so bitwise equality of
the trained weights is not reachable)."""
METRIC_BOUND = 0.05
"""Largest validation-metric difference allowed after 20 steps between 1 and 2 threads."""


def _run(tmp_path, threads: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    out = tmp_path / f"run{threads}"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    subprocess.run(
        [sys.executable, "-c", RUN, str(out), str(tmp_path / "cohort"), str(threads)],
        check=True,
        env=env,
        timeout=900,
        capture_output=True,
    )
    with np.load(out / "params.npz") as stored:
        params = {key: stored[key] for key in stored.files}
    return params, json.loads((out / "metrics.json").read_text())


@pytest.mark.slow
def test_short_run_moves_by_less_than_the_stated_bound_across_thread_counts(tmp_path):
    params_one, metrics_one = _run(tmp_path, 1)
    params_two, metrics_two = _run(tmp_path, 2)
    assert params_one.keys() == params_two.keys()
    parameter_gap = max(
        float(np.max(np.abs(params_one[key] - params_two[key]), initial=0.0)) for key in params_one
    )
    metric_gap = max(abs(metrics_one[key] - metrics_two[key]) for key in metrics_one)
    print(f"largest parameter difference {parameter_gap:.3g}, metric difference {metric_gap:.3g}")
    assert parameter_gap <= PARAMETER_BOUND
    assert metric_gap <= METRIC_BOUND
