"""Tasks by name, imported lazily: ``medvl-train <name>`` resolves through :data:`TASK_MODULES`.

A task module defines ``CONFIG_CLASS`` (a dataclass; the ``task`` section of the YAML)
and ``build_task(task_config, run_config) -> Task``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from medvl_engine.errors import ConfigError

__all__ = ["TASK_MODULES", "task_module", "task_names"]

TASK_MODULES: dict[str, str] = {
    "limit": "medvl_engine.tasks.limit.task",
    "topksiglip": "medvl_engine.tasks.topksiglip.task",
}


def task_names() -> list[str]:
    """Registered task names."""
    return sorted(TASK_MODULES)


def task_module(name: str) -> ModuleType:
    """Import and return the module of task ``name``; ConfigError if unknown or not installed."""
    if name not in TASK_MODULES:
        raise ConfigError(f"unknown training task {name!r}; choose one of {task_names()}.")
    try:
        module = importlib.import_module(TASK_MODULES[name])
    except ModuleNotFoundError as error:
        if error.name == TASK_MODULES[name]:
            raise ConfigError(
                f"training task {name!r} is registered but its module {TASK_MODULES[name]} is "
                "not available in this installation."
            ) from None
        raise
    for required in ("CONFIG_CLASS", "build_task"):
        if not hasattr(module, required):
            raise ConfigError(f"task module {module.__name__} does not define {required}.")
    return module
