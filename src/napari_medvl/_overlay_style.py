"""How a score grid is drawn: colour map, limits and hidden cells (numpy + napari colormaps).

No Qt here. The colours come from ``medvl_engine.colormaps`` (the exports use the same
look-up tables), so what the viewer shows is what a PNG or TIFF export shows. A signed map
(contrast "A minus B" without normalisation, or any map whose range crosses 0) is drawn with
the diverging map over limits symmetric about 0, so white always means 0 and a map that is
negative everywhere shows no warm colour at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["OverlayStyle", "OverlayView", "napari_colormap", "overlay_view"]

_LUT_SIZE = 256


@dataclass(frozen=True)
class OverlayStyle:
    """What the user chose for the overlay: colour map ("auto" = by sign), opacity, blending,
    and ``threshold``: cells whose value is below it are hidden (None = show all)."""

    colormap: str = "auto"
    opacity: float = 0.5
    blending: str = "translucent"
    threshold: float | None = None


@dataclass(frozen=True)
class OverlayView:
    """A grid ready to draw: ``data`` float32 [rows, cols] (NaN = transparent), the colour
    ``contrast_limits`` (low, high), the colour map's name, whether the map is ``signed``,
    and the ``value_range`` (min, max) of the scores shown."""

    data: np.ndarray
    contrast_limits: tuple[float, float]
    colormap: str
    signed: bool
    value_range: tuple[float, float]


def overlay_view(
    grid: np.ndarray,
    mode: str,
    normalize: str,
    value_range: tuple[float, float],
    style: OverlayStyle,
) -> OverlayView:
    """Data, limits and colour map for a score grid [rows, cols] drawn with ``style``.

    Signed (``is_signed``): contrast or a range crossing 0, for raw scores only (a normalised
    map lies in [0, 1]). Signed limits are (-m, m), m = max(|min|, |max|); otherwise the range.
    """
    from medvl_engine.colormaps import display_limits, is_signed, resolve_colormap

    values = np.asarray(grid, dtype=np.float32)
    low, high = float(value_range[0]), float(value_range[1])
    signed = is_signed(mode if normalize == "none" else None, (low, high))
    limits = display_limits((low, high), signed)
    if not limits[1] > limits[0]:
        limits = (limits[0], limits[0] + 1e-6)  # a flat map: one colour, still a valid range
    if style.threshold is not None:
        values = np.where(values >= style.threshold, values, np.nan).astype(np.float32)
    return OverlayView(
        data=values,
        contrast_limits=(float(limits[0]), float(limits[1])),
        colormap=resolve_colormap(style.colormap, signed),
        signed=signed,
        value_range=(low, high),
    )


@lru_cache(maxsize=16)
def napari_colormap(name: str) -> Any:
    """napari Colormap of the shared look-up table ``name`` (``colormap_lut``), named
    ``medvl <name>``; NaN cells stay transparent as for any napari colormap."""
    from napari.utils.colormaps import Colormap

    from medvl_engine.colormaps import colormap_lut

    lut = colormap_lut(name, _LUT_SIZE)
    return Colormap(colors=lut, name=f"medvl {name}", interpolation="linear")
