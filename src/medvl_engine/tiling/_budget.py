"""Budgets of a patch grid, checked before anything is allocated: whole-number patch sides
from :data:`MIN_PATCH_SIZE` to :data:`MAX_PATCH_SIZE` px, target_mpp at most
:data:`MAX_UPSAMPLING` times finer than the slide, at most :func:`max_patches` patches
(env MEDVL_MAX_PATCHES) and batches within the decode limit (:func:`check_grid_budget`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from medvl_engine.common.env import positive_int_setting
from medvl_engine.errors import ConfigError, ResourceLimitError
from medvl_engine.tiling._slide_like import slide_label

__all__ = [
    "ENV_MAX_PATCHES",
    "MAX_PATCHES",
    "MAX_PATCH_SIZE",
    "MAX_UPSAMPLING",
    "MIN_PATCH_SIZE",
    "PatchBudgetError",
    "PatchGridError",
    "check_grid_budget",
    "check_side",
    "max_patches",
    "whole_px",
]

MAX_PATCHES = 2_000_000
"""Patches one grid may hold (env MEDVL_MAX_PATCHES): a whole 75 x 25 mm glass slide at
0.5 um/px in 224 px patches is about 150,000, so ten such slides' worth. Counted before any
coordinate is made, so a patch size of 1 px or a target_mpp of 1e-6 is refused at once instead
of queuing billions of patches."""

MIN_PATCH_SIZE = 8
"""Smallest patch side, in px handed to the encoder: below it a patch shows no tissue."""

MAX_PATCH_SIZE = 8192
"""Largest patch side, in px handed to the encoder or read from the slide (200 MB as RGB)."""

MAX_UPSAMPLING = 16.0
"""How much finer than the slide target_mpp may be: each patch is upsampled that many times."""

ENV_MAX_PATCHES = "MEDVL_MAX_PATCHES"
"""The environment variable that sets :func:`max_patches`."""
_MAX_PATCH_LEVEL0 = 2**20  # level-0 px: four times the widest slide MAX_SLIDE_PIXELS allows


class PatchGridError(ConfigError, ValueError):
    """A patch size, stride, resolution or tissue threshold that cannot make a grid."""


class PatchBudgetError(PatchGridError, ResourceLimitError):
    """A grid with more patches, or patches larger, than the work budget allows."""


def max_patches() -> int:
    """Patches one grid may hold: ``$MEDVL_MAX_PATCHES`` if a positive number, else
    :data:`MAX_PATCHES`."""
    return positive_int_setting(ENV_MAX_PATCHES, MAX_PATCHES)


def whole_px(value: Any, name: str) -> int:
    """``value`` as an int when it is a whole number (1.0 is, 1.5, True and "2" are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise PatchGridError(f"{name} must be a whole number of px, got {value!r}")
    if isinstance(value, (float, np.floating)) and not (
        math.isfinite(value) and float(value).is_integer()
    ):
        raise PatchGridError(f"{name} must be a whole number of px, got {value!r}")
    return int(value)


def check_side(value: int, name: str, advice: str) -> None:
    """Refuse a patch side ``value`` px outside [MIN_PATCH_SIZE, MAX_PATCH_SIZE]; the sentence
    names it as ``name`` and ends with ``advice``."""
    if value < MIN_PATCH_SIZE:
        raise PatchGridError(
            f"{name} {value} px is below the smallest patch of {MIN_PATCH_SIZE} px, where no "
            f"tissue is visible; {advice}"
        )
    if value > MAX_PATCH_SIZE:
        raise PatchBudgetError(
            f"{name} {value:,} px is above the largest patch of {MAX_PATCH_SIZE:,} px "
            f"({3 * value * value / 2**20:,.0f} MB of pixels each); {advice}"
        )


def check_grid_budget(grid: Any, batch_size: int, slide: Any = None) -> None:
    """Refuse a patch grid (:class:`PatchGrid` or any object with its attributes) whose
    patches are not sane whole numbers of px, whose patch count is above :func:`max_patches`,
    or whose batch of ``batch_size`` patches read at once would hold more pixels than the
    decode limit (MEDVL_MAX_DECODE_PIXELS): before any patch is read or queued.
    """
    from medvl_engine.io.limits import format_pixels, max_decode_pixels

    advice = (
        f"set {MIN_PATCH_SIZE} to {MAX_PATCH_SIZE:,} px (--patch-size, or patch_size in the "
        "model folder's config)"
    )
    patch_size = whole_px(getattr(grid, "patch_size", None), "patch_size")
    check_side(patch_size, "patch_size", advice)
    size0 = whole_px(getattr(grid, "patch_size_level0", None), "patch_size_level0")
    if not 1 <= size0 <= _MAX_PATCH_LEVEL0:
        raise PatchBudgetError(
            f"patch_size_level0 must be between 1 and {_MAX_PATCH_LEVEL0:,} px (wider than any "
            f"slide), got {size0:,}; rebuild the patch grid"
        )
    read_size = whole_px(getattr(grid, "read_size", patch_size), "read_size")
    if read_size < 1:
        raise PatchGridError(f"read_size must be a positive number of px, got {read_size}")
    if read_size > MAX_PATCH_SIZE:
        check_side(read_size, "each patch read from the slide is", "use a smaller target_mpp")
    batch = whole_px(batch_size, "batch_size")
    if batch < 1:
        raise PatchGridError(f"batch_size must be a positive number of patches, got {batch}")
    coords = np.asarray(getattr(grid, "coords", np.zeros((0, 2))))
    count = int(coords.shape[0]) if coords.ndim else 0
    limit = max_patches()
    if count > limit:
        raise PatchBudgetError(
            f"the patch grid of {slide_label(slide)} holds {count:,} patches, more than the "
            f"{limit:,} one grid may hold ({ENV_MAX_PATCHES}); use a larger patch size or "
            "target_mpp, or raise the limit"
        )
    pixels = batch * max(read_size, patch_size) ** 2
    if pixels > max_decode_pixels():
        raise PatchBudgetError(
            f"a batch of {batch} patches of {max(read_size, patch_size):,} px holds "
            f"{format_pixels(pixels)}, more than the {format_pixels(max_decode_pixels())} "
            "read at once (MEDVL_MAX_DECODE_PIXELS); lower the batch size"
        )
