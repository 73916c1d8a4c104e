"""A prompt heatmap of a DICOM whole-slide image as a DICOM Parametric Map.

The map is one float32 image at patch resolution, aligned to the source's total pixel matrix:
its pixel (c, r) holds heatmap cell (c - c0, r - r0) and covers level-0 px
x in [x0 + c * s, x0 + (c + 1) * s), y likewise, where s = ``cell_size_level0`` (the patch
step), x0 = origin_x mod s and c0 = origin_x div s (y alike). So its Pixel Spacing is s times
the source's, its origin is the source's origin moved by (x0, y0) level-0 px along the
source's Image Orientation (Slide) (the source origin itself when the patch grid starts at a
multiple of s, as medvl's grids do), and it shares the source's Frame of Reference. Cells
with no patch (no tissue) hold NaN. Stored values are the scores themselves: the Real World
Value Mapping is the identity (slope 1, intercept 0, unit "no units"), labelled with the
map's mode and prompt; the recommended window is the heatmap's display range, exactly
(VOI LUT Function LINEAR_EXACT, since a score range is often narrower than 1). Frames are
TILED_SPARSE (each frame's position given) by default, which the DICOM validator ``dciodvfy``
of dicom3tools accepts without error; ``organization="TILED_FULL"`` leaves the per-frame
positions out, as the standard allows, but the validator's 2022 release reports them missing.

:func:`write_heatmap_parametric_map_pyramid` adds coarser levels, one instance each in the
same series and pyramid (one Pyramid UID): level l has pixel spacing s * 2^l times the
source's, the same origin, and pixel (c, r) holds the mean of the level l-1 pixels
(2c..2c+1, 2r..2r+1) that have a value (NaN where none has).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.colormaps import display_limits, is_signed
from medvl_engine.errors import ExportError
from medvl_engine.export.dicom.common import require_highdicom, write_dataset
from medvl_engine.export.dicom.wsi_source import (
    grid_on_source,
    require_dicom_slide,
    result_maker,
    slide_placement,
)

if TYPE_CHECKING:
    from medvl_engine.heatmap import Heatmap
    from medvl_engine.io.dicom_results.source import DicomImageSource

__all__ = [
    "PMAP_ORGANIZATIONS",
    "heatmap_on_source_grid",
    "halve_map",
    "write_heatmap_parametric_map",
    "write_heatmap_parametric_map_pyramid",
]

PMAP_ORGANIZATIONS = ("TILED_FULL", "TILED_SPARSE")
_TILE = 256
_MAX_PIXELS = 1 << 28
_SERIES_NUMBER = 900


def heatmap_on_source_grid(
    heatmap: Heatmap, source_size: tuple[int, int]
) -> tuple[np.ndarray, tuple[int, int]]:
    """(float32 [rows, cols] map over the whole source, NaN where no cell; its top-left
    corner (x0, y0) in level-0 px) for a source of ``source_size`` (columns, rows) level-0
    px (see the module docstring for the alignment, :func:`.wsi_source.grid_on_source`)."""
    grid = np.asarray(heatmap.grid, np.float32)
    return grid_on_source(
        grid, heatmap.origin_level0, heatmap.cell_size_level0, source_size, np.nan
    )


def write_heatmap_parametric_map(
    path: str | Path,
    heatmap: Heatmap,
    slide: Any,
    *,
    model: str | Path | None = None,
    organization: str = "TILED_SPARSE",
) -> Path:
    """Write ``heatmap`` of the DICOM WSI ``slide`` (an open Slide or its path) to ``path`` as
    a Parametric Map (see the module docstring); ``model`` defaults to the encoder recorded on
    the heatmap. Written atomically; a non-DICOM slide is refused with one sentence."""
    return write_heatmap_parametric_map_pyramid(
        path, heatmap, slide, model=model, organization=organization, levels=1
    )[0]


def halve_map(values: np.ndarray) -> np.ndarray:
    """float32 [ceil(R / 2), ceil(C / 2)]: each pixel the mean of the values of its 2 x 2
    block of ``values`` [R, C], NaN ignored (NaN where the whole block is NaN)."""
    rows, cols = values.shape
    padded = np.full((rows + rows % 2, cols + cols % 2), np.nan, np.float32)
    padded[:rows, :cols] = values
    blocks = padded.reshape(padded.shape[0] // 2, 2, padded.shape[1] // 2, 2)
    counts = np.isfinite(blocks).sum(axis=(1, 3))
    sums = np.nansum(blocks, axis=(1, 3), dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan).astype(np.float32)


def write_heatmap_parametric_map_pyramid(
    path: str | Path,
    heatmap: Heatmap,
    slide: Any,
    *,
    model: str | Path | None = None,
    organization: str = "TILED_SPARSE",
    levels: int | None = None,
) -> list[Path]:
    """Write the map and ``levels`` - 1 coarser levels (None: halve until the map fits one
    256 x 256 tile) as one pyramid: level 0 at ``path``, level l at ``<stem>-level<l>.dcm``
    beside it; all are written, or none. Returns the paths, finest first."""
    from medvl_engine.common.atomic import atomic_group

    path = Path(path)
    if organization not in PMAP_ORGANIZATIONS:
        raise ExportError(
            f"Cannot write {path.name}: organization '{organization}' is unknown; use "
            f"{' or '.join(PMAP_ORGANIZATIONS)}.",
            path,
        )
    source = require_dicom_slide(slide, path)
    require_highdicom()
    if model is None:
        model = (getattr(heatmap, "metadata", None) or {}).get("encoder") or None
    values, corner = heatmap_on_source_grid(heatmap, source.size)
    if values.size > _MAX_PIXELS:
        raise ExportError(
            f"Cannot write {path.name}: a map of {values.shape[1]} x {values.shape[0]} patches "
            "is too large for one Parametric Map; use a larger patch step.",
            path,
        )
    import highdicom as hd

    maps = [values]
    while (levels is None and max(maps[-1].shape) > _TILE) or (
        levels is not None and len(maps) < levels
    ):
        if maps[-1].shape == (1, 1):
            break
        maps.append(halve_map(maps[-1]))
    series, pyramid = hd.UID(), hd.UID() if len(maps) > 1 else None
    written = []
    with atomic_group():
        for level, level_values in enumerate(maps):
            target = (
                path if level == 0 else path.with_name(f"{path.stem}-level{level}{path.suffix}")
            )
            dataset = _parametric_map(
                level_values,
                corner,
                heatmap,
                source,
                model,
                organization,
                level=level,
                series=series,
                pyramid=pyramid,
            )
            written.append(write_dataset(dataset, target, sources=[source.path]))
    return written


def _parametric_map(
    values: np.ndarray,
    corner: tuple[int, int],
    heatmap: Heatmap,
    source: DicomImageSource,
    model: str | Path | None,
    organization: str,
    *,
    level: int,
    series: str,
    pyramid: str | None,
) -> Any:
    """One Parametric Map instance: pyramid ``level`` (spacing cell * 2^level source px) of
    ``series`` (in ``pyramid`` when there are several levels)."""
    import highdicom as hd
    from pydicom.sr.codedict import codes

    cell = int(heatmap.cell_size_level0) * 2**level
    maker = result_maker(model)
    mode = str(getattr(heatmap, "mode", "cosine"))
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    shown = display_limits(heatmap.value_range, is_signed(mode, heatmap.value_range))
    mapped = (min(low, float(shown[0])), max(high, float(shown[1])))
    mapping = hd.pm.RealWorldValueMapping(
        lut_label=mode[:16],
        lut_explanation=f"{mode} score: {heatmap.prompt}"[:64],
        unit=codes.UCUM.NoUnits,
        value_range=mapped,
        slope=1,
        intercept=0,
    )
    window_width = float(shown[1]) - float(shown[0])
    rows, cols = values.shape
    return hd.pm.ParametricMap(
        source_images=[source.dataset],
        pixel_array=values,
        **maker.instance(
            label="HEATMAP",
            what=f"prompt heatmap: {heatmap.prompt}",
            series_what=f"medvl heatmap: {heatmap.prompt}",
            series_number=_SERIES_NUMBER,
            series_uid=series,
            instance_number=level + 1,
        ),
        contains_recognizable_visual_features=False,
        real_world_value_mappings=[mapping],
        voi_lut_transformations=[
            hd.VOILUTTransformation(
                window_center=(float(shown[0]) + float(shown[1])) / 2.0,
                window_width=window_width if window_width > 0 else 1.0,
                voi_lut_function="LINEAR_EXACT",  # scores span less than 1: LINEAR needs >= 1
            )
        ],
        **slide_placement(source, corner, cell),
        tile_pixel_array=True,
        tile_size=(min(_TILE, rows), min(_TILE, cols)),
        dimension_organization_type=organization,
        pyramid_uid=pyramid,
        pyramid_label="medvl heatmap" if pyramid else None,
    )
