"""Slide image layers: a whole-slide image as one multiscale RGB layer in its world frame."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_medvl._layer_frame import LayerData, WorldFrame, layer_units

__all__ = ["SLIDE_KIND", "slide_frame", "slide_layer"]

SLIDE_KIND = "slide"


def slide_frame(mpp: Sequence[float] | None) -> WorldFrame:
    """World frame of a slide: micrometres when mpp (x_um, y_um) is known, else level-0 px."""
    if mpp is None or not all(np.isfinite(v) and v > 0 for v in mpp):
        return WorldFrame(units="px")
    return WorldFrame(scale_y=float(mpp[1]), scale_x=float(mpp[0]), units="um")


def slide_layer(
    slide: Any, name: str | None = None, levels: Sequence[Any] | None = None
) -> LayerData:
    """One multiscale RGB image layer over the slide's lazy dask levels (or ``levels``, the
    same pixels read another way: see ``_progressive_levels``).

    ``slide`` follows medvl_engine.io.slide.Slide (levels (H_l, W_l, 3) uint8,
    mpp (x_um, y_um) or None). The Slide object stays in ``metadata["slide"]``
    so widgets can read regions and run the engine on the same file.
    """
    frame = slide_frame(slide.mpp)
    path = Path(str(slide.path))
    levels = list(slide.levels if levels is None else levels)
    kwargs: dict[str, Any] = {
        "name": name or path.name,
        "rgb": True,
        "multiscale": True,
        "contrast_limits": (0, 255),
        "units": layer_units(frame),
        "metadata": {
            "medvl_kind": SLIDE_KIND,
            "slide": slide,
            "path": str(path),
            "mpp": None if slide.mpp is None else tuple(float(v) for v in slide.mpp),
            "world_frame": frame.as_dict(),
        },
        **frame.image_transform(),
    }
    return levels, kwargs, "image"
