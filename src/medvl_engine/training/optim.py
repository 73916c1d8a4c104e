"""What the shared loop optimises and how fast: AdamW parameter groups, the learning-rate
schedule, and the precision the forward pass runs in."""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import torch
from torch import nn

from medvl_engine.training.config import RunConfig

__all__ = ["lr_factor", "lr_schedule", "optimizer_groups", "autocast"]


def lr_factor(
    step: int, total_steps: int, warmup_steps: int, schedule: str, min_ratio: float
) -> float:
    """Learning-rate multiplier before optimiser step ``step`` (0-based).

    Linear warmup ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps,
    then ``min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2`` with ``t`` going from
    0 to 1 over the remaining steps (cosine), or 1 (constant).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / decay_steps, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def lr_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, config: RunConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    """Scales every group's learning rate by :func:`lr_factor` of the step (``run.warmup_steps``,
    ``run.schedule``, ``run.min_lr_ratio``); the factor is not part of its saved state, so a
    resumed run follows the schedule of its own config."""
    factor = functools.partial(
        lr_factor,
        total_steps=total_steps,
        warmup_steps=config.warmup_steps,
        schedule=config.schedule,
        min_ratio=config.min_lr_ratio,
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def optimizer_groups(task: Any, model: nn.Module, lr: float) -> list[dict[str, Any]]:
    """AdamW parameter groups: the task's ``optimizer_groups`` (each with an ``lr_scale``),
    else its ``trainable_parameters``, else every parameter that requires a gradient.

    Only parameters that require a gradient are kept, and groups left empty are dropped.
    """
    if hasattr(task, "optimizer_groups"):
        groups = [
            {
                "params": [p for p in group["params"] if p.requires_grad],
                "lr": lr * float(group.get("lr_scale", 1.0)),
            }
            for group in task.optimizer_groups(model)
        ]
        return [group for group in groups if group["params"]]
    if hasattr(task, "trainable_parameters"):
        return [{"params": [p for p in task.trainable_parameters(model) if p.requires_grad]}]
    return [{"params": [p for p in model.parameters() if p.requires_grad]}]


def autocast(config: RunConfig, device: torch.device) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast when ``run.amp`` is ``bf16``, or ``auto`` on CUDA; else nothing."""
    use_bf16 = config.amp == "bf16" or (config.amp == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
