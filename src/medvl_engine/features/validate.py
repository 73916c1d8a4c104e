"""Checks of patch features read from a file: numbers that mean something, or one sentence.

A store or TRIDENT/CLAM file that opens is not yet known to be right: features may be NaN or
stored as text, coordinates repeated or negative, a patch size zero, fractional or larger than
any slide. Every reader (:mod:`.store`, :mod:`.h5_import`) passes what it read through these
functions, which return the arrays in the store's types (features float32 [N, D], coords int64
[N, 2] (x, y) level-0 px) or raise DataError / CorruptFileError naming the file.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError
from medvl_engine.io.limits import max_slide_pixels

__all__ = [
    "checked_coords",
    "checked_features",
    "checked_patch_size_level0",
    "label_of",
    "largest_slide_side",
    "optional_pair",
    "optional_positive",
    "optional_text",
    "optional_whole_positive",
]

_AGAIN = "extract the features again"


def largest_slide_side() -> int:
    """The longest side (level-0 px) any slide may have: the square root of the slide limit."""
    return math.isqrt(max_slide_pixels())


def checked_features(
    features: Any, label: str, path: str | os.PathLike[str] | None, advice: str = _AGAIN
) -> np.ndarray:
    """``features`` as C-contiguous float32 ``[N, D]`` (``[1, N, D]`` accepted), finite.

    Half, single and double precision are accepted (double converted); integers, booleans,
    complex numbers and text are refused, as are NaN or infinite values (also a double too
    large for float32) and rows of zeros (unwritten rows read back as zeros).
    """
    array = np.asarray(features)
    if array.dtype.kind != "f":
        raise CorruptFileError(
            f"{label}: its features are stored as {array.dtype} values, not floating-point "
            f"numbers; {advice}.",
            path,
        )
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2 or array.shape[1] < 1:
        raise CorruptFileError(
            f"{label}: its features have shape {array.shape}, not [patches, dimensions]; {advice}.",
            path,
        )
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(out).all():
        bad = int((~np.isfinite(out)).any(axis=1).sum())
        raise CorruptFileError(
            f"{label}: {bad} of its {len(out)} feature rows hold values that are not finite "
            f"numbers (NaN or infinity), which would score as nonsense; {advice}.",
            path,
        )
    zero = int((~out.any(axis=1)).sum()) if out.size else 0
    if zero:
        raise CorruptFileError(
            f"{label}: {zero} of its {len(out)} feature rows are all zeros, which no encoder "
            "makes and which would score 0 for every prompt (a damaged or unfinished file); "
            f"{advice}.",
            path,
        )
    return out


def checked_coords(
    coords: Any, label: str, path: str | os.PathLike[str] | None, advice: str = _AGAIN
) -> np.ndarray:
    """``coords`` as int64 ``[N, 2]`` (x, y) level-0 px: whole, non-negative, no pair twice."""
    array = np.asarray(coords)
    if array.dtype.kind not in "iuf" or array.size % 2:
        raise CorruptFileError(
            f"{label}: its coords (shape {array.shape}, {array.dtype}) are not (x, y) pairs of "
            f"numbers; {advice}.",
            path,
        )
    array = array.reshape(-1, 2)
    if array.dtype.kind == "f":
        if not np.isfinite(array).all() or not np.array_equal(array, np.round(array)):
            raise CorruptFileError(
                f"{label}: its coords are not whole pixel positions (fractions, NaN or "
                f"infinity); {advice}.",
                path,
            )
        if len(array) and np.abs(array).max() > 2**62:
            raise CorruptFileError(
                f"{label}: its coords reach {np.abs(array).max():g} px, beyond any slide; "
                f"{advice}.",
                path,
            )
    if array.dtype.kind == "u" and len(array) and int(array.max()) > 2**62:
        raise CorruptFileError(
            f"{label}: its coords reach {int(array.max()):,} px, beyond any slide; {advice}.",
            path,
        )
    out = np.ascontiguousarray(array, dtype=np.int64)
    if len(out) and int(out.min()) < 0:
        raise CorruptFileError(
            f"{label}: its coords include negative positions ({int(out.min())} px), which "
            f"no patch of a slide has; {advice}.",
            path,
        )
    if len(out) > 1:
        if int(out.max()) < 2**31:  # one int64 key per (x, y): a 1-D unique, 10x faster
            keys = out[:, 0] * 2**32 + out[:, 1]
            repeated = len(out) - len(np.unique(keys))
        else:
            repeated = len(out) - len(np.unique(out, axis=0))
        if repeated:
            raise CorruptFileError(
                f"{label}: {repeated} of its {len(out)} patches repeat the coordinates of "
                "another patch, so their scores would overwrite each other (a damaged or "
                f"merged file); {advice}.",
                path,
            )
    return out


def checked_patch_size_level0(
    value: Any,
    label: str,
    path: str | os.PathLike[str] | None,
    *,
    slide_side: int | None = None,
    advice: str = "pass the right one with --patch-size-level0",
    whole: bool = True,
) -> int:
    """A patch side in level-0 px as a positive integer no larger than the slide's longest
    side (or, without a slide, than :func:`largest_slide_side`).

    Text, NaN, zero, negative values and (with ``whole``) fractions are refused in words.
    """
    number = _as_number(value)
    if number is None:
        raise DataError(
            f"{label} gives a patch size of {_shown(value)}, which is not a number; {advice}.",
            path,
        )
    if not math.isfinite(number) or number < 1:
        raise DataError(
            f"{label} gives a patch size of {number:g} level-0 px, which is not a positive "
            f"number; {advice}.",
            path,
        )
    if whole and number != round(number):
        raise DataError(
            f"{label} gives a patch size of {number:g} level-0 px, which is not a whole number "
            f"of pixels; {advice}.",
            path,
        )
    side = int(round(number))
    limit = slide_side if slide_side is not None else largest_slide_side()
    if side > limit:
        where = "the slide's longest side" if slide_side is not None else "any slide's side"
        raise DataError(
            f"{label} gives a patch size of {side:,} level-0 px, larger than {where} "
            f"({limit:,} px); {advice}.",
            path,
        )
    return side


def _as_number(value: Any) -> float | None:
    """The one number ``value`` holds (a scalar or a one-value array), else None."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        array = np.asarray(value)
    except Exception:
        return None
    if array.dtype.kind not in "iuf" or array.size < 1:
        return None
    return float(array.reshape(-1)[0])


def _shown(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def label_of(path: str | os.PathLike[str] | None, fallback: str = "The feature store") -> str:
    """The file name used in messages (``fallback`` without a path)."""
    return Path(path).name if path is not None else fallback


def _bad_attribute(path: Path, key: str, value: Any, wanted: str) -> CorruptFileError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return CorruptFileError(
        f"{path} records {key} as {shown}, not {wanted}; extract the features again.", path
    )


def _positive(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and bool(np.isfinite(value))
        and value > 0
    )


def optional_positive(attrs: dict[str, Any], key: str, path: Path) -> float | None:
    """Attribute ``key`` as a positive number, or None when absent (CorruptFileError else)."""
    value = attrs.get(key)
    if value is None:
        return None
    if not _positive(value):
        raise _bad_attribute(path, key, value, "a positive number")
    return float(value)


def optional_pair(attrs: dict[str, Any], key: str, path: Path, kind: type) -> Any:
    """Attribute ``key`` as a pair of positive ``kind`` (float or whole int), or None."""
    value = attrs.get(key)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(map(_positive, value)):
        raise _bad_attribute(path, key, value, "a pair of positive numbers")
    if kind is int and any(v != int(v) for v in value):
        raise _bad_attribute(path, key, value, "a pair of whole numbers")
    return (kind(value[0]), kind(value[1]))


def optional_whole_positive(attrs: dict[str, Any], key: str, path: Path) -> int | None:
    """Attribute ``key`` as a whole positive number, or None when absent."""
    value = attrs.get(key)
    if value is None:
        return None
    if not _positive(value) or value != int(value):
        raise _bad_attribute(path, key, value, "a whole positive number")
    return int(value)


def optional_text(attrs: dict[str, Any], key: str) -> str | None:
    """Attribute ``key`` as text, or None when absent."""
    value = attrs.get(key)
    return None if value is None else str(value)
