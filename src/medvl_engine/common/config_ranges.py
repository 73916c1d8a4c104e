"""Allowed ranges of config values, declared beside each field and checked by one function.

A config dataclass states the range of a numeric field in the field itself::

    batch_size: int = ranged(32, Range(low=1, hint="e.g. task.batch_size=8"))

or, for fields it inherits from a class it does not own, in a class-level table
``FIELD_RANGES: ClassVar[dict[str, Range]]``. :func:`check_ranges` walks every field of a
config and raises one :class:`~medvl_engine.errors.ConfigError` sentence naming the key, the
value and the allowed range for the first value outside it. ``None`` (an optional field left
unset) is always allowed; a list field checks its length and every item.

The module imports nothing of the engine but its errors, so models (reading a model folder's
config.json) and training (reading a YAML recipe) share the same tables.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from medvl_engine.errors import ConfigError

__all__ = ["RANGE_KEY", "Range", "check_ranges", "field_range", "ranged"]

RANGE_KEY = "medvl_range"
"""Key of a field's ``metadata`` that holds its :class:`Range`."""


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return f"{value:g}"


@dataclass(frozen=True)
class Range:
    """The values a numeric setting (or each item of a list setting) may take.

    ``low``/``high`` bound the value (inclusive unless ``low_open``/``high_open``); numbers
    must be finite (nan and inf are never a setting). For a list, ``min_items`` and
    ``max_items`` bound its length. ``hint`` ends the sentence with what to write instead.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    min_items: int = 0
    max_items: int | None = None
    hint: str = ""

    def describe(self) -> str:
        """The range in words: 'at least 1', 'greater than 0', 'between 0 and 1', ..."""
        low, high = self.low, self.high
        if low is not None and high is not None:
            if not self.low_open and not self.high_open:
                return f"between {_number(low)} and {_number(high)}"
            left = "(" if self.low_open else "["
            right = ")" if self.high_open else "]"
            return f"in {left}{_number(low)}, {_number(high)}{right}"
        if low is not None:
            return f"greater than {_number(low)}" if self.low_open else f"at least {_number(low)}"
        if high is not None:
            return f"less than {_number(high)}" if self.high_open else f"at most {_number(high)}"
        return "a finite number"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` (a number) is outside the range, or None when it is inside."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None  # types are checked elsewhere (coerce_value)
        if isinstance(value, float) and not math.isfinite(value):
            return f"a finite number {self.describe()}"
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return self.describe()
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return self.describe()
        return None


def ranged(default: Any = dataclasses.MISSING, rule: Range | None = None, **kwargs: Any) -> Any:
    """A dataclass field with ``default`` (a list is copied per instance) and its range."""
    metadata = {RANGE_KEY: rule if rule is not None else Range(**kwargs)}
    if isinstance(default, list | dict):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_range(config_cls: type, field: dataclasses.Field[Any]) -> Range | None:
    """The declared range of a field: its metadata, else the class's ``FIELD_RANGES``."""
    rule = field.metadata.get(RANGE_KEY)
    if rule is None:
        table: Mapping[str, Range] = getattr(config_cls, "FIELD_RANGES", {}) or {}
        rule = table.get(field.name)
    return rule if isinstance(rule, Range) else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_value(rule: Range, value: Any, name: str) -> None:
    """ConfigError naming ``name``, ``value`` and the range when ``value`` is outside it."""
    if value is None:
        return
    end = f"; {rule.hint}." if rule.hint else "; fix the value in the config or override."
    if isinstance(value, list | tuple):
        if len(value) < rule.min_items:
            need = "must not be empty" if rule.min_items == 1 else f"needs {rule.min_items} items"
            raise ConfigError(f"{name}={_shown(value)} {need}{end}")
        if rule.max_items is not None and len(value) > rule.max_items:
            raise ConfigError(
                f"{name}={_shown(value)} has {len(value)} items, more than the "
                f"{rule.max_items} allowed{end}"
            )
        for index, item in enumerate(value):
            problem = rule.problem(item)
            if problem is not None:
                raise ConfigError(
                    f"{name}={_shown(value)}: item {index} ({_shown(item)}) must be {problem}{end}"
                )
        return
    problem = rule.problem(value)
    if problem is not None:
        raise ConfigError(f"{name} must be {problem}, got {_shown(value)}{end}")


def check_ranges(
    config: Any,
    section: str,
    table: Mapping[str, Range] | None = None,
    *,
    key_format: str = "{section}.{field}",
    hint: str | None = None,
) -> None:
    """Check every field of the dataclass instance ``config`` against its declared range.

    The range of a field is ``table[name]`` when a table is given, else its metadata or the
    class's ``FIELD_RANGES``. Keys are named ``key_format.format(section=..., field=...)``
    (``run.lr``); ``hint`` replaces the ranges' own hints (e.g. "restore the model folder").
    The first value outside its range raises one :class:`ConfigError` sentence.
    """
    for field in dataclasses.fields(config):
        rule = table.get(field.name) if table is not None else field_range(type(config), field)
        if rule is None:
            continue
        if hint is not None:
            rule = dataclasses.replace(rule, hint=hint)
        name = key_format.format(section=section, field=field.name)
        check_value(rule, getattr(config, field.name), name)
