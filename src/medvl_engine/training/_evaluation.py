"""Scoring a model during training, and whether a score is the best so far.

A task that splits its evaluation (:class:`~medvl_engine.training.task.ShardedEvaluation`) is
scored on every rank at once, each rank on its shard, and the parts are gathered with a
collective (rank order); any other task is scored by ``task.evaluate`` on rank 0 alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from medvl_engine.training.checkpoint import capture_rng_state, restore_rng_state
from medvl_engine.training.config import RunConfig
from medvl_engine.training.distributed import DistInfo, gather_objects
from medvl_engine.training.optim import autocast
from medvl_engine.training.task import ShardedEvaluation, Task

__all__ = ["evaluation_metrics", "improved_choice"]


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in metrics.items()}


def evaluation_metrics(
    task: Task, model: nn.Module, info: DistInfo, config: RunConfig, back_to_train: bool
) -> dict[str, float] | None:
    """The metrics of ``model`` (unwrapped); None on a rank that does not score this task.

    ``model`` is scored in eval mode under ``torch.no_grad`` and the loop's autocast, then put
    back in train mode when ``back_to_train``. The global RNG state is left as it was, so
    evaluating never changes the batches or dropout masks training draws next.
    """
    sharded = task if isinstance(task, ShardedEvaluation) else None
    if sharded is None and not info.is_main:
        return None
    saved_rng = capture_rng_state()
    model.eval()
    with torch.no_grad(), autocast(config, info.device):
        if sharded is not None:
            part = sharded.evaluate_shard(model, info.rank, info.world_size)
        else:
            metrics = _floats(task.evaluate(model))
    if back_to_train:
        model.train()
    restore_rng_state(saved_rng)
    if sharded is not None:
        metrics = _floats(sharded.merge_evaluation(gather_objects(part)))
    return metrics


def improved_choice(
    metrics: dict[str, float], best: float | None, config: RunConfig
) -> float | None:
    """``metrics[run.select_metric]`` when it beats ``best`` (higher for ``run.select_mode``
    ``max``, lower for ``min``; anything beats None), else None (also without a metric)."""
    chosen = metrics.get(config.select_metric) if config.select_metric else None
    if chosen is None or best is None:
        return chosen
    better = chosen > best if config.select_mode == "max" else chosen < best
    return chosen if better else None
