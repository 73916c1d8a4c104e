"""Training: one loop for every model, configs, checkpoints, distribution, task registry.

The loop is :func:`train`; a model plugs in as a :class:`Task` (contract in
:mod:`medvl_engine.training.task`). Configs are :class:`RunConfig` plus a task
dataclass, loaded with :func:`load_config`. Importing this package does no I/O and
loads no torch: each name below is imported from its module on first use, so
``medvl-train --help`` (which only needs the registry) stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "RunConfig",
    "load_config",
    "apply_overrides",
    "Task",
    "train",
    "TrainingDivergedError",
    "lr_factor",
    "unwrap_model",
    "move_to_device",
    "save_checkpoint",
    "load_checkpoint",
    "DistInfo",
    "init_distributed",
    "shard_indices",
    "TASK_MODULES",
    "task_module",
    "task_names",
]

_HOMES = {
    "load_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
    "RunConfig": "config",
    "apply_overrides": "config",
    "load_config": "config",
    "DistInfo": "distributed",
    "init_distributed": "distributed",
    "shard_indices": "distributed",
    "TrainingDivergedError": "loop",
    "lr_factor": "loop",
    "train": "loop",
    "TASK_MODULES": "registry",
    "task_module": "registry",
    "task_names": "registry",
    "Task": "task",
    "move_to_device": "task",
    "unwrap_model": "task",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        module = importlib.import_module(f"{__name__}.{_HOMES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
