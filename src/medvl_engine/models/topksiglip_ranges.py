"""Allowed ranges of the TopKSigLIP model settings, shared by recipes and model folders.

The same table checks ``task.image_size=0`` in a ``medvl-train topksiglip`` recipe and
``"image_size": 100000`` in a saved model's config.json, before any model is built: one
sentence naming the key, the value and the range (:mod:`medvl_engine.common.config_ranges`).
:func:`check_topksiglip_values` adds the rules across fields (K within the grid, the grid
within the image, one width per stage) and the parameter budget of
:mod:`medvl_engine.encoders.config_budget`.
"""

from __future__ import annotations

from typing import Any

from medvl_engine.common.config_ranges import Range, check_ranges
from medvl_engine.errors import ConfigError

__all__ = ["TOPKSIGLIP_RANGES", "check_topksiglip_values"]

_STEPS = 1_000_000_000

TOPKSIGLIP_RANGES: dict[str, Range] = {
    "vision_depths": Range(
        low=1,
        high=1024,
        min_items=2,
        max_items=16,
        hint="one block count per stage, e.g. [3,3,9,3]",
    ),
    "vision_hidden_sizes": Range(
        low=1,
        high=65_536,
        min_items=2,
        max_items=16,
        hint="one width per stage, e.g. [96,192,384,768]",
    ),
    "vision_layer_scale_init": Range(low=0, high=1000, hint="e.g. 1e-6"),
    "full_image_resolution": Range(low=32, high=16_384, hint="e.g. 1024"),
    "image_size": Range(low=32, high=16_384, hint="the breast image side in px, e.g. 1536"),
    "grid": Range(low=2, high=256, hint="candidates per axis, e.g. 16"),
    "overlap": Range(low=0, high=1, high_open=True, hint="e.g. 0.5"),
    "low_res_factor": Range(low=1, high=64, hint="e.g. 3"),
    "k": Range(low=1, high=65_536, hint="patches per image, e.g. 15"),
    "tau_start": Range(low=0, low_open=True, high=1000, hint="e.g. 1.0"),
    "tau_end": Range(low=0, low_open=True, high=1000, hint="e.g. 0.667"),
    "tau_anneal_steps": Range(low=0, high=_STEPS, hint="e.g. 100000"),
    "context_length": Range(low=1, high=8192, hint="e.g. 77"),
    "embed_dim": Range(low=1, high=65_536, hint="the joint embedding width, e.g. 512"),
    "logit_scale_init": Range(low=-1000, high=1000, hint="e.g. 10"),
    "logit_bias_init": Range(low=-1000, high=1000, hint="e.g. -10, or none"),
}
"""Range of each :class:`~medvl_engine.models.topksiglip.TopKSigLIPConfig` field."""

_LIST_FIELDS = ("vision_depths", "vision_hidden_sizes")
_INT_FIELDS = (
    "full_image_resolution",
    "image_size",
    "grid",
    "low_res_factor",
    "k",
    "tau_anneal_steps",
    "context_length",
    "embed_dim",
)


def _is_number(value: Any, whole: bool) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if whole else isinstance(value, int | float)


def check_topksiglip_values(
    config: Any,
    *,
    section: str = "task",
    key_format: str = "{section}.{field}",
    hint: str | None = None,
) -> None:
    """Check a TopKSigLIP config's fields, their rules across fields and the size budget.

    ``section``/``key_format`` name the keys (``task.k``, or ``"k" in /m/config.json``);
    ``hint`` replaces the ranges' own advice (e.g. "restore the model folder"). Raises one
    :class:`ConfigError` (or :class:`~medvl_engine.errors.ResourceLimitError` for a model
    over the parameter budget) sentence.
    """
    from medvl_engine.encoders.config_budget import check_config_sizes

    def name(field: str) -> str:
        return key_format.format(section=section, field=field)

    end = f"; {hint}." if hint else "."
    for field in TOPKSIGLIP_RANGES:
        value = getattr(config, field)
        if value is None and field == "logit_bias_init":
            continue
        items = value if field in _LIST_FIELDS and isinstance(value, list) else [value]
        whole = field in _INT_FIELDS or field in _LIST_FIELDS
        if (field in _LIST_FIELDS and not isinstance(value, list)) or not all(
            _is_number(item, whole) for item in items
        ):
            kind = (
                "a list of whole numbers"
                if field in _LIST_FIELDS
                else ("a whole number" if whole else "a number")
            )
            raise ConfigError(f"{name(field)} must be {kind}, got {repr(value)[:40]}{end}")
    check_ranges(config, section, TOPKSIGLIP_RANGES, key_format=key_format, hint=hint)
    depths, widths = list(config.vision_depths), list(config.vision_hidden_sizes)
    if len(depths) != len(widths):
        raise ConfigError(
            f"{name('vision_depths')}={depths} and {name('vision_hidden_sizes')}={widths} must "
            f"give one depth and one width per stage (the same number of items){end}"
        )
    cells = config.grid * config.grid
    if config.k > cells:
        raise ConfigError(
            f"{name('k')}={config.k} exceeds the {config.grid}x{config.grid} grid: it must be "
            f"between 1 and {cells}{end}"
        )
    low_side = config.image_size // config.low_res_factor
    if low_side < config.grid:
        raise ConfigError(
            f"{name('low_res_factor')}={config.low_res_factor} shrinks the {config.image_size} px "
            f"image to {low_side} px, fewer than the {config.grid} grid cells per side; it must be "
            f"at most {max(config.image_size // config.grid, 1)}{end}"
        )
    try:
        config.geometry()
    except (ValueError, ZeroDivisionError):
        raise ConfigError(
            f"a {config.grid}x{config.grid} grid with overlap {config.overlap} does not fit a "
            f"{config.image_size} px image ({name('image_size')}, {name('grid')}); use a larger "
            f"image or a smaller grid{end}"
        ) from None
    text = config.text_config if isinstance(config.text_config, dict) else {}
    sizes = {
        "vision_depths": depths,
        "vision_hidden_sizes": widths,
        "embed_dim": config.embed_dim,
        "text_config": text,
    }
    source = section if key_format != "{section}.{field}" else f"the {section} section"
    check_config_sizes(sizes, source, what=hint or "use smaller sizes")
