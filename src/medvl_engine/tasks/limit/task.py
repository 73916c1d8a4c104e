"""The LIMIT task as ``medvl-train limit`` finds it (:mod:`medvl_engine.training.registry`).

``CONFIG_CLASS`` is the ``task`` section of ``train/limit_*.yaml``
(:class:`~medvl_engine.tasks.limit.config.LimitTaskConfig`); ``build_task`` makes the
:class:`~medvl_engine.tasks.limit.training_task.LimitTask` the shared loop trains; ``report``
prints the validation report after training; ``ACTIONS`` are the other subcommands:
``eval`` (the test split, read once, for the model chosen on validation) and ``bridge`` (the
Conch-Z least-squares bridge, fitted once into a file).
"""

from __future__ import annotations

from collections.abc import Callable

from medvl_engine.tasks.limit.bridge import bridge_action
from medvl_engine.tasks.limit.config import LimitTaskConfig
from medvl_engine.tasks.limit.report import report
from medvl_engine.tasks.limit.run_eval import eval_action
from medvl_engine.tasks.limit.training_task import LimitTask
from medvl_engine.training.config import RunConfig

__all__ = ["ACTIONS", "CONFIG_CLASS", "LimitTask", "LimitTaskConfig", "build_task", "report"]

CONFIG_CLASS = LimitTaskConfig


def build_task(config: LimitTaskConfig, run_config: RunConfig) -> LimitTask:
    """The registry entry point of ``medvl-train limit``."""
    return LimitTask(config, run_config)


# ``medvl-train limit eval``: the test split, read once, for the model chosen on validation.
# ``medvl-train limit bridge``: the Conch-Z least-squares bridge, fitted once into a file.
ACTIONS: dict[str, Callable[[RunConfig, LimitTaskConfig], int]] = {
    "eval": eval_action,
    "bridge": bridge_action,
}
