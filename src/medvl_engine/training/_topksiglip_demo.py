"""The TopKSigLIP demo recipe, shipped with the package, and its training into the cache.

:data:`DEMO_CONFIG` holds the same ``run`` / ``task`` sections as ``train/topksiglip_demo.yaml``
(a test keeps the two identical), so an installed package can train the demo model without the
repository's ``train/`` folder. :func:`train_demo_model` runs it through the shared training
loop; the task's ``install_as`` puts the final model in the cache folder that
``load_topksiglip("topksiglip-demo")`` reads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DEMO_CONFIG", "train_demo_model"]

DEMO_CONFIG: dict[str, dict[str, Any]] = {
    "run": {
        "lr": 2.0e-3,
        "weight_decay": 0.05,
        "epochs": 10,
        "warmup_steps": 10,
        "schedule": "cosine",
        "grad_clip": 1.0,
        "seed": 0,
        "out_dir": "runs/topksiglip_demo",
        "log_every": 5,
        "select_metric": "auroc_cancer",
        "select_mode": "max",
    },
    "task": {
        "synthetic_train": 800,
        "synthetic_eval": 96,
        "synthetic_size": [320, 224],
        "synthetic_seed": 0,
        "batch_size": 8,
        "augment": True,
        "report_shuffle": True,
        "vision_pretrained": None,
        "vision_depths": [1, 1, 2, 1],
        "vision_hidden_sizes": [16, 32, 64, 128],
        "vision_layer_scale_init": 0.1,
        "image_size": 256,
        "grid": 8,
        "overlap": 0.5,
        "low_res_factor": 1,
        "k": 4,
        "tau_start": 1.0,
        "tau_end": 0.6666667,
        "tau_anneal_steps": 1000,
        "text_family": "bert",
        "text_pretrained": "all-MiniLM-L6-v2",
        "freeze_text": True,
        "context_length": 128,
        "vision_pool_norm": "batchnorm",
        "embed_dim": 64,
        "logit_scale_init": 10.0,
        "logit_bias_init": 0.0,
        "objective": "sigmoid",
        "target": "tabular",
        "roi_supervision": True,
        "dice_weight": 5.0,
        "lesion_pretrain_steps": 800,
        "lesion_pretrain_lr": 1.0e-3,
        "vision_lr_scale": 0.2,
        "eval_k_sweep": [],
        "install_as": "topksiglip-demo",
    },
}


def train_demo_model(
    work_dir: str | Path | None = None, progress: Callable[[str], None] | None = None
) -> Path:
    """Train the demo model with :data:`DEMO_CONFIG` and return its cache folder.

    work_dir: where the run's checkpoints and synthetic cohort go (default
    ``<cache>/runs/topksiglip-demo``); the final model is installed into
    ``registered_model_dir("topksiglip-demo")``. progress receives one-line messages.
    Takes a few minutes on 2 CPU cores.
    """
    from medvl_engine._cache import cache_dir
    from medvl_engine.models.topksiglip import registered_model_dir
    from medvl_engine.training.config import RunConfig, config_from_mapping
    from medvl_engine.training.loop import train
    from medvl_engine.training.topksiglip_task import TopKSigLIPTaskConfig, build_task

    sections = copy.deepcopy(DEMO_CONFIG)
    sections["run"]["out_dir"] = str(work_dir or cache_dir() / "runs" / "topksiglip-demo")
    sections["run"]["progress"] = False
    run_config = config_from_mapping(RunConfig, sections["run"], "run")
    task_config = config_from_mapping(TopKSigLIPTaskConfig, sections["task"], "task")
    task = build_task(task_config, run_config)
    task.progress = progress
    train(task, run_config)
    return registered_model_dir(task_config.install_as or "topksiglip-demo")
