"""A model folder's JSON settings: config.json (and the other JSON files) read as one bounded
JSON object, its sizes checked against their ranges, and typed reads of its fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medvl_engine.errors import ModelNotFoundError

__all__ = ["CONFIG_NAME", "config_int", "config_section", "read_config", "read_json_object"]

CONFIG_NAME = "config.json"
_MAX_JSON_BYTES = 16 * 1024 * 1024


def read_json_object(path: Path, what: str = "model settings") -> dict[str, Any]:
    """The JSON object in ``path`` (at most 16 MiB), or one sentence saying what is wrong."""
    if not path.is_file():
        raise ModelNotFoundError(
            f"{path} is missing or not a regular file; restore the model folder's {what}.", path
        )
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise ModelNotFoundError(
            f"{path} is larger than {_MAX_JSON_BYTES // (1024 * 1024)} MiB, far more than "
            f"{what} need; restore the model folder.",
            path,
        )
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ModelNotFoundError(
            f"{path} is not valid JSON; restore the model folder (download or save it again).",
            path,
        ) from error
    if not isinstance(values, dict):
        raise ModelNotFoundError(
            f"{path} holds a JSON {type(values).__name__} where a JSON object with the {what} "
            "is expected; restore the model folder.",
            path,
        )
    return values


def read_config(folder: Path, *, required: bool = True) -> dict[str, Any]:
    """The folder's config.json as a dict; ``{}`` when absent and not ``required``."""
    path = Path(folder) / CONFIG_NAME
    if not path.exists() and not required:
        return {}
    values = read_json_object(path, "model settings")
    model_type = values.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ModelNotFoundError(
            f'{path} has a "model_type" of {json.dumps(model_type)[:40]}, not a name; '
            "restore the model folder.",
            path,
        )
    from medvl_engine.encoders.config_budget import check_config_sizes

    check_config_sizes(values, str(path))
    return values


def config_section(config: dict[str, Any], key: str, source: Path) -> dict[str, Any]:
    """``config[key]`` when it is a JSON object, else one sentence naming the field."""
    value = config.get(key)
    if not isinstance(value, dict):
        raise ModelNotFoundError(
            f'{source} lacks the "{key}" section (a JSON object) that describes the model; '
            "restore the model folder.",
            source,
        )
    return value


def config_int(
    config: dict[str, Any], key: str, source: Path, *, default: int | None = None, minimum: int = 1
) -> int:
    """An integer setting of at least ``minimum``; missing only when a ``default`` is given."""
    value = config.get(key, default)
    if value is None:
        raise ModelNotFoundError(
            f'{source} does not give "{key}", a size the model needs; restore the model folder.',
            source,
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelNotFoundError(
            f'{source} gives "{key}" as {json.dumps(value)[:40]}, but it must be a whole number '
            f"of at least {minimum}; restore the model folder.",
            source,
        )
    return value
