"""Sizes a model config declares, checked against a budget before any model is built.

A ``config.json`` costs a few bytes to forge, but the sizes in it decide how much memory a
model takes (``hidden_size: 1048576`` asks for terabytes of weights) and how much work an
encoder queues (``patch_size: 1`` cuts a slide into millions of one-pixel patches). Before a
model folder (or a training recipe's fresh text config) is used:

- each size key has a plausible range (:data:`SIZE_LIMITS`): widths up to 65,536, at most
  1,024 layers, images up to 16,384 px a side, ...;
- an encoder's top-level ``patch_size`` (the side of the tiles it reads; a ViT patch when the
  same object gives an ``image_size``) must be at least
  :data:`MIN_TILE_SIDE` px and its ``target_mpp`` at least :data:`MIN_TARGET_MPP` um/px;
- the parameter count estimated from the sizes (transformer layers ~ 12 x hidden^2,
  embeddings, ConvNeXt stages ~ 8 x width^2 per block) must stay under
  :func:`max_model_parameters` (env ``MEDVL_MAX_MODEL_PARAMETERS``).

Each refusal is one :class:`~medvl_engine.errors.ResourceLimitError` (or
:class:`~medvl_engine.errors.ModelNotFoundError` for a value that is no size at all) naming
the file, the key, the value and the allowed range.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from medvl_engine.common.env import positive_int_setting
from medvl_engine.errors import ModelNotFoundError, ResourceLimitError

__all__ = [
    "MAX_MODEL_PARAMETERS",
    "MIN_TARGET_MPP",
    "MIN_TILE_SIDE",
    "SIZE_LIMITS",
    "check_config_sizes",
    "estimate_parameters",
    "max_model_parameters",
]

MAX_MODEL_PARAMETERS = 4_000_000_000
"""Parameters a model config may declare (16 GB in float32; the largest pathology foundation
models have about 1.1 billion)."""

_ENV_PARAMETERS = "MEDVL_MAX_MODEL_PARAMETERS"

MIN_TILE_SIDE = 16
"""Smallest side in px of the tiles an encoder reads (its top-level ``patch_size``)."""

MIN_TARGET_MPP = 0.05
"""Finest resolution in um/px an encoder may ask slides to be read at (``target_mpp``)."""

MAX_TARGET_MPP = 1000.0

_WIDTH = 65_536
SIZE_LIMITS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, _WIDTH),
    "intermediate_size": (1, 4 * _WIDTH),
    "embed_dim": (1, _WIDTH),
    "projection_dim": (1, _WIDTH),
    "width": (1, _WIDTH),
    "d_model": (1, _WIDTH),
    "num_hidden_layers": (0, 1024),
    "depth": (0, 1024),
    "num_attention_heads": (1, 1024),
    "vocab_size": (1, 10_000_000),
    "max_position_embeddings": (1, 1_000_000),
    "context_length": (1, 1_000_000),
    "image_size": (1, 16_384),
    "full_image_resolution": (1, 16_384),
    "num_channels": (1, 64),
}
"""Allowed range of each size key, wherever it appears in the config (nested sections too)."""

_LIST_LIMITS: dict[str, tuple[int, int]] = {
    "hidden_sizes": (1, _WIDTH),
    "depths": (0, 1024),
    "vision_hidden_sizes": (1, _WIDTH),
    "vision_depths": (0, 1024),
}
_MAX_TOKENS = 1 << 16  # patches of one ViT input (518 px / 14 px = 1,369 for ViT-L/14)


def max_model_parameters() -> int:
    """Parameters a model config may declare (env MEDVL_MAX_MODEL_PARAMETERS overrides)."""
    return positive_int_setting(_ENV_PARAMETERS, MAX_MODEL_PARAMETERS)


def _sections(values: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every JSON object in ``values`` with its dotted location ("" for the top level)."""
    stack: list[tuple[str, Any]] = [(path, values)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, Mapping):
            yield where, value
            for key, item in value.items():
                shown = json.dumps(str(key))[1:-1][:40]  # a key may hold newlines or quotes
                stack.append((f"{where}.{shown}" if where else shown, item))
        elif isinstance(value, list):
            for index, item in enumerate(value[:64]):
                stack.append((f"{where}[{index}]", item))


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value)


def _int(section: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = _int_or_none(section.get(key))
        if value is not None:
            return max(value, 0)
    return default


def _int_list(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [max(_int_or_none(v) or 0, 0) for v in value]


def estimate_parameters(values: Mapping[str, Any]) -> int:
    """A rough parameter count of the model a config describes (an upper-bound style guess).

    Per JSON object: a transformer of ``L`` layers of width ``h`` and MLP width ``m`` counts
    ``L * (4 h^2 + 2 h m)`` plus ``(vocab + positions + patch tokens) * h``; ConvNeXt stages of
    widths ``w_i`` and depths ``d_i`` count ``d_i * (8 w_i^2 + 49 w_i)``; a width alone counts
    one ``h^2`` layer.
    """
    total = 0
    for _, section in _sections(values):
        hidden = _int(section, "hidden_size", "width", "d_model", "embed_dim")
        layers = _int(section, "num_hidden_layers", "depth", "n_layer", "num_layers")
        if hidden:
            inner = _int(section, "intermediate_size", default=4 * hidden)
            total += max(layers, 1) * (4 * hidden * hidden + 2 * hidden * inner)
            total += _int(section, "vocab_size") * hidden
            total += _int(section, "max_position_embeddings", "context_length") * hidden
            image, patch = _int(section, "image_size"), _int(section, "patch_size")
            if image and patch:
                total += (image // max(patch, 1)) ** 2 * hidden + 3 * patch * patch * hidden
        for widths_key, depths_key in (
            ("hidden_sizes", "depths"),
            ("vision_hidden_sizes", "vision_depths"),
        ):
            widths = _int_list(section.get(widths_key))
            depths = _int_list(section.get(depths_key))
            for index, width in enumerate(widths):
                depth = depths[index] if index < len(depths) else 1
                total += max(depth, 1) * (8 * width * width + 49 * width)
    return total


def _words(count: int) -> str:
    for size, word in ((10**12, "trillion"), (10**9, "billion"), (10**6, "million")):
        if count >= size:
            return f"{count / size:.3g} {word}"
    return f"{count:,}"


def _refuse_size(source: str, key: str, value: Any, allowed: str, what: str) -> ResourceLimitError:
    shown = repr(value)[:40]
    return ResourceLimitError(
        f'{source} gives "{key}" as {shown}, but it must be {allowed}; {what}.', source
    )


def check_config_sizes(
    values: Mapping[str, Any], source: str, *, what: str = "restore the model folder"
) -> None:
    """Refuse a config whose sizes exceed the budget (see the module docstring).

    ``source`` names the file (or setting) in the sentence; ``what`` says what to do. Keys
    that are absent or not numbers are left to the loaders, which say what they need.
    """
    for where, section in _sections(values):
        for key, (low, high) in SIZE_LIMITS.items():
            if key not in section:
                continue
            number = _int_or_none(section[key])
            if section[key] is None:
                continue
            if number is None or not low <= number <= high:
                name = f"{where}.{key}" if where else key
                raise _refuse_size(
                    source, name, section[key], f"a whole number between {low} and {high:,}", what
                )
        for key, (low, high) in _LIST_LIMITS.items():
            items = section.get(key)
            if not isinstance(items, list):
                continue
            name = f"{where}.{key}" if where else key
            if not 1 <= len(items) <= 16:
                raise _refuse_size(source, name, items, "a list of 1 to 16 sizes", what)
            for item in items:
                number = _int_or_none(item)
                if number is None or not low <= number <= high:
                    raise _refuse_size(
                        source,
                        name,
                        items,
                        f"a list of whole numbers between {low} and {high:,}",
                        what,
                    )
        hidden = _int_or_none(section.get("hidden_size"))
        heads = _int_or_none(section.get("num_attention_heads"))
        if hidden and heads and hidden % heads:
            name = f"{where}.num_attention_heads" if where else "num_attention_heads"
            raise ModelNotFoundError(
                f'{source} gives "{name}" as {heads}, which does not divide the hidden size '
                f"{hidden} (each head takes an equal share); {what}.",
                source,
            )
        image, patch = (
            _int_or_none(section.get("image_size")),
            _int_or_none(section.get("patch_size")),
        )
        if image and patch is not None and "patch_size" in section:
            if patch < 1 or (image // patch) ** 2 > _MAX_TOKENS:
                name = f"{where}.patch_size"
                raise _refuse_size(
                    source,
                    name,
                    section["patch_size"],
                    f"a whole number that cuts the {image} px image into at most "
                    f"{_MAX_TOKENS:,} patches",
                    what,
                )
    if "image_size" not in values:  # with an image size, patch_size is a ViT patch
        _check_tiling(values, source, what)
    estimate = estimate_parameters(values)
    limit = max_model_parameters()
    if estimate > limit:
        raise ResourceLimitError(
            f"{source} describes a model of about {_words(estimate)} parameters, more than the "
            f"{_words(limit)} this machine allows ({_ENV_PARAMETERS}); {what}, or raise "
            f"{_ENV_PARAMETERS} if the model is real and the machine has the memory.",
            source,
        )


def _check_tiling(values: Mapping[str, Any], source: str, what: str) -> None:
    """An encoder's top-level ``patch_size`` (tile side, px) and ``target_mpp`` (um/px)."""
    if "patch_size" in values and values["patch_size"] is not None:
        side = _int_or_none(values["patch_size"])
        if side is None or not MIN_TILE_SIDE <= side <= 16_384:
            raise _refuse_size(
                source,
                "patch_size",
                values["patch_size"],
                f"a tile side between {MIN_TILE_SIDE} and 16,384 px (smaller tiles queue "
                "millions of patches per slide)",
                what,
            )
    if "target_mpp" in values and values["target_mpp"] is not None:
        mpp = values["target_mpp"]
        if isinstance(mpp, bool) or not isinstance(mpp, int | float):
            raise ModelNotFoundError(
                f'{source} gives "target_mpp" as {repr(mpp)[:40]}, not a number of micrometres '
                f"per pixel; {what}.",
                source,
            )
        if not MIN_TARGET_MPP <= mpp <= MAX_TARGET_MPP:
            raise _refuse_size(
                source,
                "target_mpp",
                mpp,
                f"between {MIN_TARGET_MPP} and {MAX_TARGET_MPP:g} micrometres per pixel (finer "
                "resolutions than any scanner queue millions of patches per slide)",
                what,
            )
