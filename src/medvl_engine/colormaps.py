"""Colour maps shared by every export and by the viewer (numpy only).

One sequential, perceptually uniform map (:data:`SEQUENTIAL_MAP`, viridis) for scores that do
not change sign, and one diverging blue-white-red map (:data:`DIVERGING_MAP`, white at 0) for
signed scores (contrast "A minus B", any map whose range crosses 0), always shown over limits
symmetric around 0. The napari plugin builds its Colormap objects from :func:`colormap_lut`, so
viewer and exports show the same colours. The older names ``jet``, ``coolwarm`` and ``gray``
stay accepted when asked for by name.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "AUTO_COLORMAP",
    "COLORMAPS",
    "COLORMAP_CHOICES",
    "DIVERGING_MAP",
    "SEQUENTIAL_MAP",
    "apply_colormap",
    "colormap_for",
    "colormap_lut",
    "display_limits",
    "is_signed",
    "resolve_colormap",
]

SEQUENTIAL_MAP = "viridis"
DIVERGING_MAP = "blue-white-red"
AUTO_COLORMAP = "auto"
"""Pass as a colour map name to get :data:`SEQUENTIAL_MAP` or :data:`DIVERGING_MAP` by sign."""

# Anchor colours (uint8 RGB), evenly spaced over [0, 1], linearly interpolated.
COLORMAPS: dict[str, np.ndarray] = {
    # matplotlib's viridis sampled at 0, 1/8, ..., 1.
    "viridis": np.array(
        [
            [68, 1, 84],
            [72, 40, 120],
            [62, 73, 137],
            [49, 104, 142],
            [38, 130, 142],
            [31, 158, 137],
            [53, 183, 121],
            [110, 206, 88],
            [253, 231, 37],
        ],
        dtype=np.float32,
    ),
    # Blue (negative) - white (0) - red (positive), symmetric in lightness about the centre.
    "blue-white-red": np.array(
        [
            [5, 48, 97],
            [33, 102, 172],
            [103, 169, 207],
            [209, 229, 240],
            [255, 255, 255],
            [253, 219, 199],
            [239, 138, 98],
            [178, 24, 43],
            [103, 0, 31],
        ],
        dtype=np.float32,
    ),
    "jet": np.array(
        [[0, 0, 143], [0, 0, 255], [0, 255, 255], [255, 255, 0], [255, 0, 0], [128, 0, 0]],
        dtype=np.float32,
    ),
    "coolwarm": np.array(
        [[59, 76, 192], [141, 176, 254], [221, 221, 221], [244, 154, 123], [180, 4, 38]],
        dtype=np.float32,
    ),
    "gray": np.array([[0, 0, 0], [255, 255, 255]], dtype=np.float32),
}

COLORMAP_CHOICES: tuple[str, ...] = (AUTO_COLORMAP, *COLORMAPS)
"""Names a user may pass (CLI ``--colormap``, export options)."""


def _check_name(name: str) -> np.ndarray:
    if name not in COLORMAPS:
        raise ValueError(f"unknown colormap {name!r}; choose one of {', '.join(COLORMAP_CHOICES)}")
    return COLORMAPS[name]


def colormap_for(signed: bool) -> str:
    """:data:`DIVERGING_MAP` for signed scores, else :data:`SEQUENTIAL_MAP`."""
    return DIVERGING_MAP if signed else SEQUENTIAL_MAP


def is_signed(mode: str | None, value_range: tuple[float, float] | None) -> bool:
    """True for a contrast map ("A minus B") or a range that crosses 0 (low < 0 < high)."""
    if mode == "contrast":
        return True
    if value_range is None:
        return False
    low, high = float(value_range[0]), float(value_range[1])
    return low < 0.0 < high


def display_limits(value_range: tuple[float, float], signed: bool) -> tuple[float, float]:
    """Colour limits: ``value_range`` itself, or (-m, m) with m = max(|low|, |high|) if signed.

    A degenerate symmetric range (all zeros) becomes (-1, 1) so the colour bar still has a span.
    """
    low, high = float(value_range[0]), float(value_range[1])
    if not signed:
        return low, high
    magnitude = max(abs(low), abs(high))
    if not np.isfinite(magnitude) or magnitude == 0.0:
        magnitude = 1.0
    return -magnitude, magnitude


def resolve_colormap(name: str | None, signed: bool) -> str:
    """The map to draw with: ``name``, or the sign's default for None / ``"auto"``.

    Raises ValueError (one sentence) for an unknown name.
    """
    if name is None or name == AUTO_COLORMAP:
        return colormap_for(signed)
    _check_name(name)
    return name


def colormap_lut(name: str, n: int = 256) -> np.ndarray:
    """Look-up table of ``name``: float32 RGBA [n, 4] in [0, 1], entry i at value i / (n - 1)."""
    if n < 2:
        raise ValueError(f"a colour look-up table needs at least 2 entries, got {n}")
    rgb = _interpolate(_check_name(name), np.linspace(0.0, 1.0, n, dtype=np.float32)) / 255.0
    lut = np.ones((n, 4), dtype=np.float32)
    lut[:, :3] = rgb
    return lut


def apply_colormap(values: np.ndarray, name: str = SEQUENTIAL_MAP) -> np.ndarray:
    """Values float [...] in [0, 1] (clipped; NaN -> 0) -> uint8 RGB [..., 3]."""
    anchors = _check_name(name)
    position = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float32)), 0, 1)
    return np.clip(_interpolate(anchors, position) + 0.5, 0, 255).astype(np.uint8)


def _interpolate(anchors: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Piecewise-linear colour at ``position`` [...] in [0, 1] -> float RGB [..., 3] (0..255)."""
    scaled = position * (len(anchors) - 1)
    low = np.minimum(scaled.astype(np.int64), len(anchors) - 2)
    fraction = (scaled - low)[..., None]
    return np.asarray(anchors[low] * (1 - fraction) + anchors[low + 1] * fraction)
