"""Sections of a flat config dataclass: how a task's settings are grouped in YAML and on save.

A config class stays one flat dataclass (``config.k``, ``Config(k=4)``,
``dataclasses.replace(config, seed=1)``) and declares its sections in a class variable::

    SECTIONS: ClassVar[Sections] = {
        "model": TopKSigLIPConfig,                 # a dataclass: its fields are the section
        "loss": ("objective", "dice_weight"),      # or a tuple of field names
    }

Every field belongs to exactly one section. A YAML ``task`` mapping may then be written by
sections (``model: {k: 4}``), flat as before (``k: 4``), or mixed; :func:`flatten_sections`
turns it flat, refusing a setting given twice or placed in the wrong section. A section may
share its name with a field (LIMIT's ``loss``) unless that field holds a mapping: a mapping
value is the section, anything else the field. :func:`config_values` gives the saved form,
grouped by section.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from medvl_engine.errors import ConfigError

__all__ = ["Sections", "config_values", "flatten_sections", "section_fields", "section_of"]

Sections = Mapping[str, type | tuple[str, ...]]
"""What a config class's ``SECTIONS`` holds: section name to a dataclass or field names."""


def _is_mapping_type(annotation: Any) -> bool:
    origin = typing.get_origin(annotation) or annotation
    if origin in (typing.Union, types.UnionType):
        return any(_is_mapping_type(arg) for arg in typing.get_args(annotation))
    return origin is dict or origin is Mapping


def section_fields(config_cls: type) -> dict[str, tuple[str, ...]]:
    """Section name to its field names, in declaration order; ``{}`` for a class without
    ``SECTIONS``. Raises TypeError when the declaration does not cover every field exactly
    once, names a field the class lacks, or gives a section the name of a mapping field."""
    declared: Sections | None = getattr(config_cls, "SECTIONS", None)
    if not declared:
        return {}
    fields = {field.name: field for field in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    sections: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for name, members in declared.items():
        names = (
            tuple(f.name for f in dataclasses.fields(members))
            if isinstance(members, type)
            else tuple(members)
        )
        for field in names:
            if field not in fields:
                raise TypeError(
                    f"{config_cls.__name__}.SECTIONS[{name!r}] names no field {field!r}"
                )
            if field in owner:
                raise TypeError(
                    f"{config_cls.__name__}: field {field!r} is in sections {owner[field]!r} "
                    f"and {name!r}"
                )
            owner[field] = name
        if name in fields and _is_mapping_type(hints[name]):
            raise TypeError(
                f"{config_cls.__name__}: section {name!r} shares a mapping field's name"
            )
        sections[name] = names
    missing = [name for name in fields if name not in owner]
    if missing:
        raise TypeError(f"{config_cls.__name__}: fields {missing} belong to no section")
    return sections


def section_of(config_cls: type, field: str) -> str | None:
    """The section holding ``field`` (None for a class without sections or an unknown name)."""
    for name, members in section_fields(config_cls).items():
        if field in members:
            return name
    return None


def flatten_sections(config_cls: type, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``values`` (a ``task`` mapping written by sections, flat, or mixed) as a flat mapping of
    field names. ``where`` names the mapping in errors (``"task"``). A setting given twice, or
    a section holding a name that is not one of its settings, is one ConfigError sentence;
    names that are neither sections nor fields pass through (the caller refuses them)."""
    sections = section_fields(config_cls)
    if not sections or not isinstance(values, Mapping):
        return dict(values) if isinstance(values, Mapping) else values
    flat: dict[str, Any] = {}
    given_as: dict[str, str] = {}

    def put(field: str, value: Any, label: str) -> None:
        if field in flat:
            raise ConfigError(
                f"{where}.{field} is given twice ({given_as[field]} and {label}); keep one."
            )
        flat[field], given_as[field] = value, label

    for key, value in values.items():
        if key in sections and isinstance(value, Mapping):
            members = sections[key]
            for field, item in value.items():
                if field not in members:
                    home = section_of(config_cls, field) if isinstance(field, str) else None
                    place = f" (it belongs in {where}.{home})" if home else ""
                    raise ConfigError(
                        f"{where}.{key} has no setting {field!r}{place}; valid names are "
                        f"{sorted(members)}."
                    )
                put(field, item, f"{where}.{key}.{field}")
        elif key in sections and not any(key in members for members in sections.values()):
            raise ConfigError(
                f"{where}.{key} is a section, so it takes indented 'name: value' lines, not "
                f"{value!r}; valid names are {sorted(sections[key])}."
            )
        else:
            put(key, value, f"{where}.{key}")
    return flat


def config_values(config: Any) -> dict[str, Any]:
    """The values of a config dataclass as saved: grouped by section when its class declares
    ``SECTIONS`` (``{"model": {...}, "loss": {...}}``), else flat (``dataclasses.asdict``)."""
    values = dataclasses.asdict(config)
    sections = section_fields(type(config))
    if not sections:
        return values
    return {name: {field: values[field] for field in members} for name, members in sections.items()}
