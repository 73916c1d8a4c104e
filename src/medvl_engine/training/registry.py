"""Tasks by name, imported lazily: ``medvl-train <name>`` resolves through :data:`TASK_MODULES`.

A task module defines ``CONFIG_CLASS`` (a dataclass; the ``task`` section of the YAML)
and ``build_task(task_config, run_config) -> Task``. A task's YAML recipes are package data in
the ``recipes/`` folder beside its module (:func:`recipe_path`, :func:`task_recipes`); the
``train/`` folder of a checkout links to them.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

from medvl_engine.errors import ConfigError

__all__ = ["TASK_MODULES", "recipe_path", "task_module", "task_names", "task_recipes"]

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


def _recipes_folder(name: str) -> Path:
    """``recipes/`` beside the module of task ``name`` (found without importing it)."""
    if name not in TASK_MODULES:
        raise ConfigError(f"unknown training task {name!r}; choose one of {task_names()}.")
    spec = importlib.util.find_spec(TASK_MODULES[name].rsplit(".", 1)[0])
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"training task {name!r} is not available in this installation.")
    return Path(next(iter(spec.submodule_search_locations))) / "recipes"


def task_recipes(name: str) -> list[Path]:
    """The YAML recipes shipped with task ``name``, sorted by file name."""
    return sorted(_recipes_folder(name).glob("*.yaml"))


def recipe_path(name: str, recipe: str) -> Path:
    """The shipped recipe file ``recipe`` (e.g. ``topksiglip_demo.yaml``) of task ``name``;
    ConfigError naming the recipes there when it is not one of them."""
    path = _recipes_folder(name) / recipe
    if not path.is_file():
        shipped = [p.name for p in task_recipes(name)]
        raise ConfigError(f"task {name!r} ships no recipe {recipe!r}; it ships {shipped}.")
    return path
