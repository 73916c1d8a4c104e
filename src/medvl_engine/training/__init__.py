"""Training: one loop for every model, configs, checkpoints, distribution, task registry.

The loop is :func:`train` (one :class:`Trainer` run: resume, step, evaluate, checkpoint,
fit); a model plugs in as a :class:`Task` (contract in
:mod:`medvl_engine.training.task`). Configs are :class:`RunConfig` plus a task
dataclass, loaded with :func:`load_config`. Importing this package does no I/O and
loads no torch: each name below is imported from its module on first use, so
``medvl-train --help`` (which only needs the registry) stays fast.
"""

from medvl_engine.common.lazy import lazy_exports

__all__ = [
    "RunConfig",
    "load_config",
    "apply_overrides",
    "Task",
    "train",
    "Trainer",
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "load_checkpoint": "checkpoint",
        "save_checkpoint": "checkpoint",
        "RunConfig": "config",
        "apply_overrides": "config",
        "load_config": "config",
        "DistInfo": "distributed",
        "init_distributed": "distributed",
        "shard_indices": "distributed",
        "TrainingDivergedError": "loop",
        "lr_factor": "optim",
        "train": "loop",
        "Trainer": "loop",
        "TASK_MODULES": "registry",
        "task_module": "registry",
        "task_names": "registry",
        "Task": "task",
        "move_to_device": "task",
        "unwrap_model": "task",
    },
)
