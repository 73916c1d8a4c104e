"""Run configuration: a dataclass, loaded from YAML, with type-checked ``key=value`` overrides.

A config file has two sections::

    run:            # fields of :class:`RunConfig` (the shared loop)
      lr: 1.0e-5
    task:           # fields of the task's own config dataclass
      negatives: 4

Overrides on the command line are ``run.lr=1e-4`` or ``task.negatives=2``; a bare
``lr=1e-4`` is accepted when the name exists in exactly one section. Values are
parsed as YAML scalars and checked against the field's type annotation, so
``run.epochs=two`` fails with a :class:`ConfigError` naming the field and the type.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from medvl_engine.errors import ConfigError

__all__ = [
    "RunConfig",
    "load_config",
    "apply_overrides",
    "config_from_mapping",
    "coerce_value",
]


@dataclasses.dataclass
class RunConfig:
    """Settings of the shared training loop (optimiser, schedule, precision, checkpoints)."""

    lr: float = 1e-5
    weight_decay: float = 1e-5
    epochs: int = 3
    max_steps: int | None = None  # total optimiser steps; the schedule spans this many
    stop_at_step: int | None = None  # stop early (e.g. a time-boxed job); schedule unchanged
    warmup_steps: int = 0
    schedule: Literal["cosine", "constant"] = "cosine"
    min_lr_ratio: float = 0.0
    grad_accum: int = 1
    grad_clip: float | None = 1.0
    amp: Literal["auto", "bf16", "off"] = "auto"  # auto = bf16 autocast on CUDA, off on CPU
    seed: int = 0
    out_dir: str = "runs/limit"
    ckpt_every: int = 0  # optimiser steps between checkpoints; 0 = end of each epoch only
    resume: str | None = None  # None, "auto" (out_dir/checkpoint.pt if present) or a path
    max_bad_steps: int = 10  # skipped non-finite steps; the max_bad_steps-th one stops training
    log_every: int = 1
    device: str = "auto"  # auto = cuda:<local rank> when available, else cpu
    progress: bool = True
    select_metric: str | None = None  # evaluate() key that picks the best epoch
    select_mode: Literal["max", "min"] = "max"
    ddp_find_unused_parameters: bool = False
    dist_timeout_minutes: float = 120.0  # how long a collective waits for the slowest rank
    # DataLoader worker processes per rank (tasks with batch_at); 0 = load in this process
    num_workers: int = 0
    prefetch_factor: int = 2  # batches each worker loads ahead
    pin_memory: bool | Literal["auto"] = "auto"  # auto = page-locked batches when on CUDA
    seeds: list[int] | None = None  # one run per seed into <out_dir>/seed-<s> (medvl-train)
    # Moving average of the weights (decay d in (0, 1), e.g. 0.99); when set, evaluation,
    # best/ and final/ use the averaged weights. None: the trained weights themselves.
    ema_decay: float | None = None

    def __post_init__(self) -> None:
        if self.epochs < 0:
            raise ConfigError(
                f"run.epochs must be at least 0 (0 evaluates without training), got {self.epochs}."
            )
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(self.seeds)):
            raise ConfigError(
                f"run.seeds must list distinct seeds, got {self.seeds}; write e.g. "
                "run.seeds=[0,1,2]."
            )
        positive = {
            "grad_accum": self.grad_accum,
            "log_every": self.log_every,
        }
        for name, value in positive.items():
            if value < 1:
                raise ConfigError(
                    f"run.{name} must be at least 1, got {value}; set a positive value."
                )
        if self.lr <= 0:
            raise ConfigError(f"run.lr must be positive, got {self.lr}; set e.g. run.lr=1e-5.")
        if self.max_bad_steps < 0 or self.warmup_steps < 0 or self.ckpt_every < 0:
            raise ConfigError(
                "run.max_bad_steps, run.warmup_steps and run.ckpt_every must be >= 0."
            )
        if self.num_workers < 0 or self.prefetch_factor < 1:
            raise ConfigError(
                f"run.num_workers must be >= 0 and run.prefetch_factor >= 1, got "
                f"{self.num_workers} and {self.prefetch_factor}; e.g. run.num_workers=2."
            )
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ConfigError(
                f"run.ema_decay must lie between 0 and 1 (e.g. 0.99), got {self.ema_decay}; "
                "or leave it unset to evaluate the trained weights themselves."
            )
        if self.dist_timeout_minutes <= 0:
            raise ConfigError(
                f"run.dist_timeout_minutes must be positive, got {self.dist_timeout_minutes}; "
                "set e.g. run.dist_timeout_minutes=120."
            )


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def coerce_value(value: Any, annotation: Any, name: str) -> Any:
    """Return ``value`` checked (and losslessly converted) against a type annotation.

    Accepts int for float fields, ``None`` for optional fields, lists for tuple/list
    fields. Raises :class:`ConfigError` naming ``name`` and the expected type.
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return coerce_value(value, option, name)
            except ConfigError as error:
                errors.append(error)
        raise ConfigError(
            f"{name} must be {_type_name(annotation)}, got {value!r}; fix the value in the "
            "config or override."
        )
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{name} must be one of {list(args)}, got {value!r}.")
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} must be a list, got {value!r}; write it as [a, b, ...].")
        item_type = args[0] if args else Any
        items = [coerce_value(v, item_type, f"{name}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or annotation is tuple) else items
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name} must be a mapping, got {value!r}.")
        return dict(value)
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-5" (no dot) as a string
            with contextlib.suppress(ValueError):
                return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    elif isinstance(value, annotation):
        return value
    raise ConfigError(
        f"{name} must be {_type_name(annotation)}, got {value!r} ({type(value).__name__}); "
        "fix the value in the config or override."
    )


def _field_types(config_cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(config_cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(config_cls)}


def config_from_mapping(config_cls: type, values: Mapping[str, Any], section: str) -> Any:
    """Build ``config_cls`` from a mapping, rejecting unknown keys and ill-typed values."""
    types_by_name = _field_types(config_cls)
    unknown = sorted(set(values) - set(types_by_name))
    if unknown:
        raise ConfigError(
            f"unknown {section} setting(s) {unknown}; valid names are {sorted(types_by_name)}."
        )
    checked = {
        key: coerce_value(value, types_by_name[key], f"{section}.{key}")
        for key, value in values.items()
    }
    return config_cls(**checked)


def _parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not key=value; write e.g. run.lr=1e-4.")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str) and value.lower() in ("none", "null"):
        value = None
    return key, value


def apply_overrides(
    sections: dict[str, dict[str, Any]],
    overrides: Sequence[str],
    field_names: Mapping[str, Sequence[str]],
) -> dict[str, dict[str, Any]]:
    """Merge ``key=value`` overrides into YAML sections (a new dict; inputs untouched).

    field_names maps a section name to its valid field names; a bare key must name
    a field of exactly one section.
    """
    merged = {name: dict(sections.get(name) or {}) for name in field_names}
    for text in overrides:
        key, value = _parse_override(text)
        if "." in key:
            section, field = key.split(".", 1)
            if section not in field_names:
                raise ConfigError(
                    f"override {text!r} names unknown section {section!r}; use one of "
                    f"{sorted(field_names)}."
                )
        else:
            owners = [name for name, fields in field_names.items() if key in fields]
            if len(owners) != 1:
                where = "no section" if not owners else f"several sections {owners}"
                raise ConfigError(
                    f"override {text!r}: {key!r} is found in {where}; prefix it, e.g. run.{key}=..."
                )
            section, field = owners[0], key
        if field not in field_names[section]:
            raise ConfigError(
                f"override {text!r}: {section} has no setting {field!r}; valid names are "
                f"{sorted(field_names[section])}."
            )
        merged[section][field] = value
    return merged


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    task_config_cls: type | None = None,
) -> tuple[RunConfig, Any]:
    """Read a YAML config (sections ``run`` and ``task``), apply overrides, type-check.

    Returns ``(RunConfig, task_config)``; task_config is ``None`` when no class is given.
    """
    sections: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist; pass an existing YAML file.", path
            )
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise ConfigError(
                f"config file {path} is not valid YAML ({error}); fix it.", path
            ) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"config file {path} must hold a mapping with 'run' and 'task'.", path
            )
        allowed = {"run", "task"}
        extra = sorted(set(loaded) - allowed)
        if extra:
            raise ConfigError(
                f"config file {path} has unknown section(s) {extra}; only 'run' and 'task' exist.",
                path,
            )
        sections = loaded
    field_names = {"run": [f.name for f in dataclasses.fields(RunConfig)]}
    if task_config_cls is not None:
        field_names["task"] = [f.name for f in dataclasses.fields(task_config_cls)]
    elif sections.get("task"):
        raise ConfigError("the config has a 'task' section but no task config class was given.")
    merged = apply_overrides(sections, overrides, field_names)
    run_config = config_from_mapping(RunConfig, merged["run"], "run")
    task_config = (
        config_from_mapping(task_config_cls, merged["task"], "task") if task_config_cls else None
    )
    return run_config, task_config
