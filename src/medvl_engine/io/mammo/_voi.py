"""DICOM grayscale pipeline: Modality LUT, VOI LUT and MONOCHROME1 inversion (PS3.3 C.11).

Every function takes stored or modality values ``x`` as a numpy array of any
shape and returns float64 of the same shape. VOI outputs are in [0, 1]
(y_min = 0, y_max = 1 in the standard's equations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "apply_lut",
    "full_range_window",
    "invert_monochrome1",
    "rescale",
    "voi_linear",
    "voi_linear_exact",
    "voi_lut",
    "voi_sigmoid",
    "voi_window",
]


def rescale(x: np.ndarray, slope: float = 1.0, intercept: float = 0.0) -> np.ndarray:
    """Modality LUT by rescale (C.11.1.1.2): y = slope * x + intercept; both must be finite."""
    if not (math.isfinite(slope) and math.isfinite(intercept)):
        raise ValueError(f"rescale slope {slope} and intercept {intercept} must be finite numbers")
    return np.asarray(x, dtype=np.float64) * float(slope) + float(intercept)


def apply_lut(x: np.ndarray, descriptor: Sequence[int], data: Sequence[int]) -> np.ndarray:
    """Table lookup of a Modality or VOI LUT Sequence item (C.11.1.1.1, C.11.2.1.1).

    ``descriptor`` = (number of entries, first input value mapped, bits per entry);
    0 entries means 65536. Inputs below the first mapped value take the first
    entry, inputs above the last mapped value take the last entry. Returns the
    raw table values (not normalised).
    """
    entries = int(descriptor[0]) or 65536
    first = int(descriptor[1])
    table = np.asarray(data, dtype=np.float64)[:entries]
    if table.size == 0:
        raise ValueError("the LUT holds no entries")
    index = np.clip(np.rint(np.asarray(x, dtype=np.float64)) - first, 0, table.size - 1)
    return np.asarray(table[index.astype(np.int64)])


def _check_center(center: float) -> None:
    if not math.isfinite(center):
        raise ValueError(f"window centre {center} is not a finite number")


def voi_linear(x: np.ndarray, center: float, width: float) -> np.ndarray:
    """VOI LUT Function LINEAR (C.11.2.1.2.1), output in [0, 1]; requires width >= 1.

    x <= c - 0.5 - (w - 1) / 2 -> 0;  x > c - 0.5 + (w - 1) / 2 -> 1;
    else y = (x - (c - 0.5)) / (w - 1) + 0.5.
    """
    _check_center(center)
    if not width >= 1:  # also NaN
        raise ValueError(f"window width {width} is below 1, which LINEAR does not allow")
    x = np.asarray(x, dtype=np.float64)
    if width == 1:
        return np.where(x <= center - 0.5, 0.0, 1.0)
    low = center - 0.5 - (width - 1) / 2
    high = center - 0.5 + (width - 1) / 2
    inside = (x - (center - 0.5)) / (width - 1) + 0.5
    return np.where(x <= low, 0.0, np.where(x > high, 1.0, inside))


def voi_linear_exact(x: np.ndarray, center: float, width: float) -> np.ndarray:
    """VOI LUT Function LINEAR_EXACT (C.11.2.1.3.2), output in [0, 1]; requires width > 0.

    x <= c - w / 2 -> 0;  x > c + w / 2 -> 1;  else y = (x - c) / w + 0.5.
    """
    _check_center(center)
    if not width > 0:  # also NaN
        raise ValueError(f"window width {width} is not positive, which LINEAR_EXACT requires")
    x = np.asarray(x, dtype=np.float64)
    inside = (x - center) / width + 0.5
    return np.where(x <= center - width / 2, 0.0, np.where(x > center + width / 2, 1.0, inside))


def voi_sigmoid(x: np.ndarray, center: float, width: float) -> np.ndarray:
    """VOI LUT Function SIGMOID (C.11.2.1.3.1): y = 1 / (1 + exp(-4 (x - c) / w))."""
    _check_center(center)
    if not width > 0:  # also NaN
        raise ValueError(f"window width {width} is not positive, which SIGMOID requires")
    x = np.asarray(x, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(np.clip(-4.0 * (x - center) / width, -700, 700)))


_FUNCTIONS = {"LINEAR": voi_linear, "LINEAR_EXACT": voi_linear_exact, "SIGMOID": voi_sigmoid}


def voi_window(x: np.ndarray, center: float, width: float, function: str = "LINEAR") -> np.ndarray:
    """Window by VOI LUT Function name (LINEAR when absent), output in [0, 1]."""
    name = (function or "LINEAR").strip().upper()
    if name not in _FUNCTIONS:
        raise ValueError(f"VOI LUT Function {name!r} is not LINEAR, LINEAR_EXACT or SIGMOID")
    return _FUNCTIONS[name](x, float(center), float(width))


def voi_lut(x: np.ndarray, descriptor: Sequence[int], data: Sequence[int]) -> np.ndarray:
    """VOI LUT Sequence item, output in [0, 1] (table value / (2**bits - 1))."""
    bits = int(descriptor[2]) if len(descriptor) > 2 and int(descriptor[2]) > 0 else 16
    return apply_lut(x, descriptor, data) / float(2**bits - 1)


def full_range_window(x: np.ndarray) -> np.ndarray:
    """Without VOI attributes: the image's own range maps linearly onto [0, 1]."""
    x = np.asarray(x, dtype=np.float64)
    low, high = float(x.min()), float(x.max())
    if high <= low:
        return np.zeros_like(x)
    return (x - low) / (high - low)


def invert_monochrome1(y: np.ndarray) -> np.ndarray:
    """MONOCHROME1 shows minimum values as white: after VOI, y -> 1 - y."""
    return 1.0 - np.asarray(y, dtype=np.float64)
