"""Run configuration: a dataclass, loaded from YAML, with type-checked ``key=value`` overrides.

A config file has two sections::

    run:            # fields of :class:`RunConfig` (the shared loop)
      lr: 1.0e-5
    task:           # fields of the task's own config dataclass
      negatives: 4

A task config class may group its fields (``SECTIONS``, see :mod:`._sections`); its ``task``
mapping is then written by sections (``task: {model: {k: 4}}``) or flat as before, and saved by
sections (:func:`config_values`). Overrides on the command line are ``run.lr=1e-4``,
``task.negatives=2`` or ``task.model.k=4``; a bare ``lr=1e-4`` is accepted when the name exists
in exactly one section. Values are
parsed as YAML scalars and checked against the field's type annotation, so
``run.epochs=two`` fails with a :class:`ConfigError` naming the field and the type.

Every value is then checked against its field's allowed range (declared with the field, see
:mod:`medvl_engine.common.config_ranges`; ``batch_size=0``, ``lr=nan``, ``seed=-1`` are one sentence
naming the key, the value and the range) and a config class may add checks across fields in a
``validate()`` method; all of it runs on load, before any data are made. The YAML file itself
must be a regular text file of at most :data:`MAX_CONFIG_BYTES` (env ``MEDVL_MAX_CONFIG_BYTES``)
nested at most :data:`MAX_CONFIG_DEPTH` levels deep, without anchors or aliases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import stat
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from medvl_engine.common.config_ranges import Range, check_ranges, check_value, field_range, ranged
from medvl_engine.errors import ConfigError
from medvl_engine.training._sections import (
    Sections,
    config_values,
    flatten_sections,
    section_fields,
    section_of,
)
from medvl_engine.training._yaml_config import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    PSEUDO_FOLDERS,
    max_config_bytes,
    read_yaml_config,
    safe_yaml,
)

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_SEED",
    "RunConfig",
    "Sections",
    "config_values",
    "flatten_sections",
    "section_fields",
    "section_of",
    "check_input_file",
    "check_output_folder",
    "check_values",
    "max_config_bytes",
    "load_config",
    "apply_overrides",
    "config_from_mapping",
    "coerce_value",
    "read_yaml_config",
]

MAX_SEED = 2**32 - 1
"""Largest seed (numpy's generators take 32-bit seeds)."""

_MAX_OVERRIDE_CHARS = 64 * 1024
_BIG = 1_000_000_000  # steps, epochs: beyond any run, but finite
_SEED = Range(low=0, high=MAX_SEED, hint="give a seed from 0 to 4294967295, e.g. run.seed=0")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d{1,3})?")


@dataclasses.dataclass
class RunConfig:
    """Settings of the shared training loop (optimiser, schedule, precision, checkpoints).

    Each numeric field declares its allowed range
    (:func:`medvl_engine.common.config_ranges.ranged`);
    construction checks them, the output folder and the rules across fields.
    """

    lr: float = ranged(1e-5, low=0, low_open=True, high=10, hint="e.g. run.lr=1e-5")
    weight_decay: float = ranged(1e-5, low=0, high=10, hint="e.g. run.weight_decay=0.01")
    epochs: int = ranged(3, low=0, hint="0 evaluates without training; e.g. run.epochs=3")
    # total optimiser steps; the schedule spans this many (none: epochs x batches)
    max_steps: int | None = ranged(
        None, low=0, high=_BIG, hint="or none to train for run.epochs; e.g. run.max_steps=1000"
    )
    # stop early (e.g. a time-boxed job); schedule unchanged
    stop_at_step: int | None = ranged(None, low=0, high=_BIG, hint="or none not to stop early")
    warmup_steps: int = ranged(0, low=0, high=_BIG, hint="e.g. run.warmup_steps=100")
    schedule: Literal["cosine", "constant"] = "cosine"
    min_lr_ratio: float = ranged(0.0, low=0, high=1, hint="e.g. run.min_lr_ratio=0.1")
    grad_accum: int = ranged(1, low=1, high=65_536, hint="e.g. run.grad_accum=4")
    grad_clip: float | None = ranged(
        1.0, low=0, low_open=True, high=1e6, hint="or none for no clipping; e.g. run.grad_clip=1"
    )
    amp: Literal["auto", "bf16", "off"] = "auto"  # auto = bf16 autocast on CUDA, off on CPU
    seed: int = ranged(0, _SEED)
    out_dir: str = "runs/limit"
    # optimiser steps between checkpoints; 0 = end of each epoch only
    ckpt_every: int = ranged(0, low=0, high=_BIG, hint="0 saves at the end of each epoch")
    resume: str | None = None  # None, "auto" (out_dir/checkpoint.pt if present) or a path
    # skipped non-finite steps; the max_bad_steps-th one stops training
    max_bad_steps: int = ranged(10, low=0, high=_BIG, hint="e.g. run.max_bad_steps=10")
    log_every: int = ranged(1, low=1, high=_BIG, hint="set a positive value, e.g. run.log_every=10")
    device: str = "auto"  # auto = cuda:<local rank> when available, else cpu
    progress: bool = True
    select_metric: str | None = None  # evaluate() key that picks the best epoch
    select_mode: Literal["max", "min"] = "max"
    ddp_find_unused_parameters: bool = False
    # how long a collective waits for the slowest rank
    dist_timeout_minutes: float = ranged(
        120.0, low=0, low_open=True, high=100_000, hint="e.g. run.dist_timeout_minutes=120"
    )
    # CPU threads torch uses for math in each process (torch.set_num_threads); none: torch's
    # default (one per core). One thread is faster where the cores are shared with other work.
    threads: int | None = ranged(None, low=1, high=4096, hint="e.g. run.threads=1, or none")
    # DataLoader worker processes per rank (tasks with batch_at); 0 = load in this process
    num_workers: int = ranged(0, low=0, high=256, hint="e.g. run.num_workers=2")
    prefetch_factor: int = ranged(2, low=1, high=1024, hint="e.g. run.prefetch_factor=2")
    pin_memory: bool | Literal["auto"] = "auto"  # auto = page-locked batches when on CUDA
    # one run per seed into <out_dir>/seed-<s> (medvl-train)
    seeds: list[int] | None = ranged(
        None, low=0, high=MAX_SEED, max_items=1000, hint="write e.g. run.seeds=[0,1,2]"
    )
    # Moving average of the weights (decay d in (0, 1), e.g. 0.99); when set, evaluation,
    # best/ and final/ use the averaged weights. None: the trained weights themselves.
    ema_decay: float | None = ranged(
        None,
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        hint="e.g. 0.99, or leave it unset to evaluate the trained weights themselves",
    )

    def __post_init__(self) -> None:
        check_ranges(self, "run")
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(self.seeds)):
            raise ConfigError(
                f"run.seeds must list distinct seeds, got {self.seeds}; write e.g. "
                "run.seeds=[0,1,2]."
            )

    def validate(self) -> None:
        """Checks run when a config is loaded: the output folder and the checkpoint to resume
        from (on the file system), and the device name."""
        check_output_folder(self.out_dir, "run.out_dir")
        if self.resume not in (None, "", "auto"):
            check_input_file(str(self.resume), "run.resume", "the checkpoint.pt of an earlier run")
        if not _DEVICE.fullmatch(self.device):
            raise ConfigError(
                f"run.device={self.device!r} is not a device name; write auto, cpu, cuda, "
                "cuda:<index> or mps."
            )


def check_input_file(value: str, name: str, what: str) -> Path:
    """``value`` as an existing regular file the run will read (``what``), checked from its
    ``stat`` alone: a missing path, a folder, a pipe or a device is refused in one sentence
    naming ``name``, before any data is made."""
    from medvl_engine.errors import MedVLError
    from medvl_engine.guarded_files import require_data_file

    try:
        return require_data_file(Path(value).expanduser(), "checkpoint")
    except MedVLError as error:
        detail = error.message.split(": ", 1)[-1].split(";")[0]
        raise ConfigError(f"{name}={value!r}: {detail}; give {what}.") from None


def check_output_folder(value: str, name: str) -> Path:
    """``value`` as a folder path a run can create or reuse; nothing is created.

    Refused in one sentence naming ``name``: an empty path, an existing file (``/dev/null``,
    a regular file), a place under ``/dev``, ``/proc`` or ``/sys``, and a path whose nearest
    existing parent is not a folder this user may write into.
    """
    if not value.strip():
        raise ConfigError(f"{name} is empty; give the folder the run writes into.")
    path = Path(value).expanduser()
    absolute = Path(os.path.abspath(path))
    try:
        resolved = absolute.resolve()
    except (OSError, RuntimeError):
        resolved = absolute
    if any(resolved == root or root in resolved.parents for root in PSEUDO_FOLDERS):
        raise ConfigError(
            f"{name}={value!r} lies under {resolved.parts[0]}{resolved.parts[1]}, where the "
            "system keeps devices and process files, not runs; give a folder such as runs/my-run."
        )
    try:
        mode = os.stat(absolute).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as error:
        raise ConfigError(
            f"{name}={value!r} cannot be inspected ({error.strerror}); give a folder this user "
            "can create."
        ) from None
    if mode is not None:
        if not stat.S_ISDIR(mode):
            raise ConfigError(
                f"{name}={value!r} is an existing file, not a folder; give a folder path for the "
                "run's checkpoints and models."
            )
        return path
    parent = absolute.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(
            f"{name}={value!r} cannot be created because {parent} is a file, not a folder; give "
            "another folder path."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{name}={value!r} cannot be created because {parent} is not writable by this user; "
            "give a folder you can write into."
        )
    return path


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


def check_values(config_cls: type, values: Mapping[str, Any], section: str) -> None:
    """Check typed ``values`` (field name to value) against the ranges ``config_cls`` declares."""
    for field in dataclasses.fields(config_cls):
        if field.name in values:
            rule = field_range(config_cls, field)
            if rule is not None:
                check_value(rule, values[field.name], f"{section}.{field.name}")


def config_from_mapping(config_cls: type, values: Mapping[str, Any], section: str) -> Any:
    """Build ``config_cls`` from a mapping, rejecting unknown keys, ill-typed values and values
    outside their declared range; then run the class's ``validate()`` (checks across fields)."""
    if not isinstance(values, Mapping):
        raise ConfigError(
            f"the {section} section must be a mapping of settings (name: value), got "
            f"{_shown(values)}; write it as '{section}:' followed by indented 'name: value' lines."
        )
    values = flatten_sections(config_cls, values, section)
    types_by_name = _field_types(config_cls)
    not_names = [key for key in values if not isinstance(key, str)]
    if not_names:
        raise ConfigError(
            f"{section} setting names must be words, got {_shown(not_names[0])}; valid names are "
            f"{sorted(types_by_name)}."
        )
    unknown = sorted(set(values) - set(types_by_name))
    if unknown:
        raise ConfigError(
            f"unknown {section} setting(s) {unknown}; valid names are {sorted(types_by_name)}."
        )
    checked = {
        key: coerce_value(value, types_by_name[key], f"{section}.{key}")
        for key, value in values.items()
    }
    check_values(config_cls, checked, section)
    try:
        config = config_cls(**checked)
    except (TypeError, ValueError, ArithmeticError) as error:  # a class's own __post_init__
        raise ConfigError(
            f"the {section} settings do not fit together ({error}); fix the config or overrides."
        ) from None
    validate = getattr(config, "validate", None)
    if callable(validate):
        validate()
    return config


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_override(text: str) -> tuple[str, Any]:
    if len(text) > _MAX_OVERRIDE_CHARS:
        raise ConfigError(
            f"override {text[:30]!r}... is {len(text):,} characters long, more than the "
            f"{_MAX_OVERRIDE_CHARS:,} a setting may take; put long values in the config file."
        )
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not key=value; write e.g. run.lr=1e-4.")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = safe_yaml(raw, f"override {key}") if raw.strip() else ""
    except ConfigError as error:
        if "not valid YAML" not in error.message:
            raise
        value = raw
    if isinstance(value, str) and value.lower() in ("none", "null"):
        value = None
    return key, value


def apply_overrides(
    sections: Mapping[str, Any],
    overrides: Sequence[str],
    field_names: Mapping[str, Sequence[str]],
    subsections: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Merge ``key=value`` overrides into YAML sections (a new dict; inputs untouched).

    field_names maps a section name to its valid field names; a bare key must name
    a field of exactly one section. subsections maps a section name to the sections of its
    config class (:func:`section_fields`), so that ``task.model.k=4`` means ``task.k=4``.
    """
    merged: dict[str, dict[str, Any]] = {}
    for name in field_names:
        section = sections.get(name)
        if section is not None and not isinstance(section, Mapping):
            raise ConfigError(
                f"the {name} section must be a mapping of settings (name: value), got "
                f"{_shown(section)}; write it as '{name}:' followed by indented 'name: value' "
                "lines."
            )
        merged[name] = dict(section or {})
    for text in overrides:
        key, value = _parse_override(text)
        if "." in key:
            section_name, field = key.split(".", 1)
            if section_name not in field_names:
                raise ConfigError(
                    f"override {text!r} names unknown section {section_name!r}; use one of "
                    f"{sorted(field_names)}."
                )
            field = _subsection_field(
                text, section_name, field, (subsections or {}).get(section_name)
            )
        else:
            owners = [name for name, fields in field_names.items() if key in fields]
            if len(owners) != 1:
                where = "no section" if not owners else f"several sections {owners}"
                raise ConfigError(
                    f"override {text!r}: {key!r} is found in {where}; prefix it, e.g. run.{key}=..."
                )
            section_name, field = owners[0], key
        if field not in field_names[section_name]:
            raise ConfigError(
                f"override {text!r}: {section_name} has no setting {field!r}; valid names are "
                f"{sorted(field_names[section_name])}."
            )
        merged[section_name][field] = value
    return merged


def _subsection_field(
    text: str, section: str, rest: str, sections: Mapping[str, Sequence[str]] | None
) -> str:
    """The field an override's ``rest`` (after ``section.``) names: ``k`` or ``model.k``."""
    if "." not in rest:
        if sections and rest in sections and not any(rest in m for m in sections.values()):
            raise ConfigError(
                f"override {text!r}: {section}.{rest} is a section, not a setting; name one of "
                f"its settings, e.g. {section}.{rest}.{sections[rest][0]}=..."
            )
        return rest
    part, field = rest.split(".", 1)
    if not sections or part not in sections:
        known = f"; its sections are {sorted(sections)}" if sections else ""
        raise ConfigError(f"override {text!r}: {section} has no section {part!r}{known}.")
    if field not in sections[part]:
        raise ConfigError(
            f"override {text!r}: {section}.{part} has no setting {field!r}; valid names are "
            f"{sorted(sections[part])}."
        )
    return field


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    task_config_cls: type | None = None,
) -> tuple[RunConfig, Any]:
    """Read a YAML config (sections ``run`` and ``task``), apply overrides, check everything.

    Returns ``(RunConfig, task_config)``; task_config is ``None`` when no class is given.
    Every value is type- and range-checked and the classes' ``validate()`` run, so a bad value
    is one :class:`ConfigError` sentence before any data are made.
    """
    sections: dict[str, Any] = {}
    if path is not None:
        loaded = read_yaml_config(path)
        allowed = {"run", "task"}
        extra = sorted(str(key) for key in loaded if key not in allowed)
        if extra:
            raise ConfigError(
                f"config file {path} has unknown section(s) {extra}; only 'run' and 'task' exist.",
                path,
            )
        sections = loaded
    field_names = {"run": [f.name for f in dataclasses.fields(RunConfig)]}
    subsections: dict[str, dict[str, tuple[str, ...]]] = {}
    if task_config_cls is not None:
        field_names["task"] = [f.name for f in dataclasses.fields(task_config_cls)]
        subsections["task"] = section_fields(task_config_cls)
        if isinstance(sections.get("task"), Mapping):
            sections = {
                **sections,
                "task": flatten_sections(task_config_cls, sections["task"], "task"),
            }
    elif sections.get("task"):
        raise ConfigError("the config has a 'task' section but no task config class was given.")
    merged = apply_overrides(sections, overrides, field_names, subsections)
    run_config = config_from_mapping(RunConfig, merged["run"], "run")
    task_config = (
        config_from_mapping(task_config_cls, merged["task"], "task") if task_config_cls else None
    )
    return run_config, task_config
