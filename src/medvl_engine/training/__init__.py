"""Training: one loop for every model, configs, checkpoints, distribution, task registry.

The loop is :func:`train`; a model plugs in as a :class:`Task` (contract in
:mod:`medvl_engine.training.task`). Configs are :class:`RunConfig` plus a task
dataclass, loaded with :func:`load_config`. Importing this package does no I/O.
"""

from medvl_engine.training.checkpoint import load_checkpoint, save_checkpoint
from medvl_engine.training.config import RunConfig, apply_overrides, load_config
from medvl_engine.training.distributed import DistInfo, init_distributed, shard_indices
from medvl_engine.training.loop import TrainingDivergedError, lr_factor, train
from medvl_engine.training.registry import TASK_MODULES, task_module, task_names
from medvl_engine.training.task import Task, move_to_device, unwrap_model

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
