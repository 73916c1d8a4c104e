"""``medvl-train topksiglip``: the task module the training registry names.

It defines what :mod:`medvl_engine.training.registry` asks of a task module: ``CONFIG_CLASS``
(:class:`~medvl_engine.tasks.topksiglip.config.TopKSigLIPTaskConfig`, the ``task`` section of a
recipe), ``build_task`` (a :class:`~medvl_engine.tasks.topksiglip.training_task.TopKSigLIPTask`),
``report`` (printed after training) and ``ACTIONS`` (``eval``: the test-split evaluation of
:mod:`medvl_engine.tasks.topksiglip.run_eval`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.training_task import TopKSigLIPTask
from medvl_engine.training.config import RunConfig

__all__ = [
    "ACTIONS",
    "CONFIG_CLASS",
    "TopKSigLIPTaskConfig",
    "build_task",
    "evaluate_test_split",
    "report",
]

CONFIG_CLASS = TopKSigLIPTaskConfig


def build_task(task_config: TopKSigLIPTaskConfig, run_config: RunConfig) -> TopKSigLIPTask:
    """The task for ``medvl-train topksiglip``; an unusable ``install_as`` name (the shipped
    demo's, or a path) stops here, before any data is made or any step is trained."""
    if task_config.install_as:
        from medvl_engine.encoders.resolve import registered_model_dir

        registered_model_dir(task_config.install_as)
    return TopKSigLIPTask(task_config, run_config)


def report(task: TopKSigLIPTask, summary: dict[str, Any]) -> None:
    """Store the skipped-row and training-row counts in ``summary``; print the last
    validation metrics (zero-shot, k sweep, localisation) as a table."""
    summary["skipped_birads_0_6"] = task.skipped_birads_0_6
    summary["train_rows"] = len(task._training_set())
    summary["train_rows_total"] = task.train_rows_total
    metrics = task.last_metrics
    if not metrics:
        return
    print(
        "TopKSigLIP validation (last evaluation; AUROC chance = 0.5; *_chance = a random map's "
        "value; test metrics: medvl-train topksiglip eval)"
    )
    for key in sorted(metrics):
        value = metrics[key]
        shown = f"{value:.0f}" if key == "roi_cases" else f"{value:.3f}"
        print(f"  {key:<40} {shown}")
    if math.isfinite(summary.get("steps", float("nan"))):
        print(f"  {'trained steps':<40} {summary['steps']}")


def evaluate_test_split(run_config: RunConfig, task_config: TopKSigLIPTaskConfig) -> int:
    """``medvl-train topksiglip eval``: see :mod:`medvl_engine.tasks.topksiglip.run_eval`."""
    from medvl_engine.tasks.topksiglip.run_eval import evaluate_test_split as run

    return run(run_config, task_config, TopKSigLIPTask)


ACTIONS: dict[str, Callable[[RunConfig, TopKSigLIPTaskConfig], int]] = {"eval": evaluate_test_split}
