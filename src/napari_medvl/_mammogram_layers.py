"""Mammogram image layers: the views of an exam side by side, each in its own world frame."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_medvl._layer_frame import LayerData, WorldFrame

__all__ = ["MAMMOGRAM_GAP_PX", "MAMMOGRAM_KIND", "mammogram_layers"]

MAMMOGRAM_KIND = "mammogram"
MAMMOGRAM_GAP_PX = 64


def _view_name(mammogram: Any) -> str:
    parts = [p for p in (mammogram.laterality, mammogram.view) if p]
    return " ".join(parts) if parts else Path(str(mammogram.path)).stem


def mammogram_layers(
    mammograms: Sequence[Any], gap_px: int = MAMMOGRAM_GAP_PX, start_x: float = 0.0
) -> list[LayerData]:
    """Grayscale image layers, one per view, side by side from left to right.

    Each ``mammogram`` follows medvl_engine.io.mammo.Mammogram (pixels float32
    [H, W] in [0, 1] after the DICOM display pipeline). View i is shifted right
    by ``start_x`` plus the widths of the views before it and ``gap_px`` each; the
    shift is kept in ``metadata["world_frame"]`` so boxes in the view's source px
    land on it.
    """
    layers: list[LayerData] = []
    offset_x = float(start_x)
    used_names: set[str] = set()
    for mammogram in mammograms:
        pixels = np.asarray(mammogram.pixels, dtype=np.float32)
        frame = WorldFrame(offset_x=offset_x, units="px")
        name = _view_name(mammogram)
        if name in used_names:
            name = f"{name} ({Path(str(mammogram.path)).stem})"
        used_names.add(name)
        kwargs = {
            "name": name,
            "colormap": "gray",
            "contrast_limits": (0.0, 1.0),
            "metadata": {
                "medvl_kind": MAMMOGRAM_KIND,
                "mammogram": mammogram,
                "path": str(mammogram.path),
                "laterality": mammogram.laterality,
                "view": mammogram.view,
                "pixel_spacing": mammogram.pixel_spacing,
                "world_frame": frame.as_dict(),
            },
            **frame.image_transform(),
        }
        layers.append((pixels, kwargs, "image"))
        offset_x += pixels.shape[1] + gap_px
    return layers
