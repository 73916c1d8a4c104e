"""Colour maps for exports (numpy only): value in [0, 1] -> uint8 RGB."""

from __future__ import annotations

import numpy as np

__all__ = ["COLORMAPS", "apply_colormap"]

# Anchor colours, evenly spaced over [0, 1], linearly interpolated.
COLORMAPS: dict[str, np.ndarray] = {
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


def apply_colormap(values: np.ndarray, name: str = "jet") -> np.ndarray:
    """Values float [...] in [0, 1] (clipped; NaN -> 0) -> uint8 RGB [..., 3]."""
    if name not in COLORMAPS:
        raise ValueError(f"unknown colormap {name!r}; choose one of {', '.join(COLORMAPS)}")
    anchors = COLORMAPS[name]
    position = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float32)), 0, 1)
    position = position * (len(anchors) - 1)
    low = np.minimum(position.astype(np.int64), len(anchors) - 2)
    fraction = (position - low)[..., None]
    rgb = anchors[low] * (1 - fraction) + anchors[low + 1] * fraction
    return np.clip(rgb + 0.5, 0, 255).astype(np.uint8)
