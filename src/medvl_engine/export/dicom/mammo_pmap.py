"""The TopK-Patch importance map as a Parametric Map over each source view.

The importance ``[G, G]`` = w / sum w lives on the candidate grid of the breast image (CC
rows over MLO rows, each view cropped, flipped, rotated and resized; cell edges
``cell_bounds`` in model px). For view V the map is resampled to V's own pixel matrix
(rows x columns of the source image): pixel (i, j), centre (j + 0.5, i + 0.5) source px, is
mapped into the breast image by V's placement (the affine of
:class:`medvl_engine.io.mammo.BreastImage`) and takes the importance of the cell holding that
point (nearest cell: the map is piecewise constant, so no value is invented); pixels outside
V's crop (background the model never saw from this view) are 0.

Geometry. The Parametric Map IOD requires a Frame of Reference with plane position and
orientation, which a For Presentation mammogram (a projection) does not have. The map
therefore gets a new Frame of Reference of its own, the detector plane of its source: x along
the columns, y along the rows (Image Orientation 1\0\0\0\1\0), origin at the top-left
corner of the image, so the first pixel's centre lies at (col_spacing / 2, row_spacing / 2,
0) mm, with the source's Pixel Spacing (else Imager Pixel Spacing; 1 mm when the source
states neither). Why the full matrix and not a coarser one: with no Frame of Reference shared
with the source, the only tie between map and image is the Derivation Image reference, and
only a map on the source's own pixel matrix can declare Spatial Locations Preserved = YES
there, so a viewer overlays it pixel for pixel. The cost is one float32 per source pixel
(54 MB for a 4096 x 3328 view), uncompressed, as DICOM has no compression for float pixels.

Real World Value Mapping: identity (slope 1, intercept 0), unit UCUM "1", quantity
99MEDVL TOPK-IMPORTANCE; the stored float is the importance itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.export.dicom.common import Equipment, new_uid, private_code, series_laterality

if TYPE_CHECKING:
    from pydicom.dataset import Dataset

    from medvl_engine.models.topksiglip_results import TopKRunSummary

__all__ = ["PM_SERIES_NUMBER", "importance_on_view", "topk_parametric_map"]

PM_SERIES_NUMBER = 9303
"""Series Number of the importance Parametric Maps (one instance per view)."""

_ROWS_PER_CHUNK = 512
_ORIENTATION = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
"""Image Orientation of the map's own frame: rows along x, columns along y (mm)."""


def _cells(bounds: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index of the cell of ``bounds`` ([G + 1] edges) holding each of ``values``."""
    grid = len(bounds) - 1
    return np.clip(np.searchsorted(bounds, values, side="right") - 1, 0, grid - 1)


def importance_on_view(run: TopKRunSummary, view: str) -> np.ndarray:
    """float32 ``[rows, columns]`` of source view ``view``: the importance of the grid cell
    each pixel centre falls in (see module docstring), 0 outside the view's crop."""
    result, breast = run.result, run.breast
    placement = breast.placements[view]
    rows, columns = placement.source_shape
    importance = np.asarray(result.importance, dtype=np.float32)
    bounds = np.asarray(result.cell_bounds, dtype=np.float64)
    height, width = breast.image.shape[:2]
    # breast-image px -> model px (the model resizes the breast image to its side S)
    scale_x, scale_y = bounds[-1] / width, bounds[-1] / height
    m = np.asarray(placement.matrix, dtype=np.float64)
    x0, y0, x1, y1 = (int(v) for v in placement.crop)
    out = np.zeros((rows, columns), dtype=np.float32)
    xs = np.arange(x0, x1, dtype=np.float64) + 0.5
    for start in range(y0, y1, _ROWS_PER_CHUNK):
        stop = min(start + _ROWS_PER_CHUNK, y1)
        ys = np.arange(start, stop, dtype=np.float64)[:, None] + 0.5
        bx = (m[0, 0] * xs[None, :] + m[0, 1] * ys + m[0, 2]) * scale_x
        by = (m[1, 0] * xs[None, :] + m[1, 1] * ys + m[1, 2]) * scale_y
        out[start:stop, x0:x1] = importance[_cells(bounds, by), _cells(bounds, bx)]
    return out


def _spacing(reference: Dataset) -> tuple[float, float]:
    """(row_mm, col_mm) of the source: Pixel Spacing, else Imager Pixel Spacing, else 1 mm."""
    for keyword in ("PixelSpacing", "ImagerPixelSpacing"):
        value = reference.get(keyword)
        try:
            row, column = (float(v) for v in value)
        except (TypeError, ValueError):
            continue
        if row > 0 and column > 0:
            return row, column
    return 1.0, 1.0


def topk_parametric_map(
    run: TopKRunSummary,
    view: str,
    reference: Dataset,
    equipment: Equipment,
    instance_number: int,
    series_uid: str,
) -> Any:
    """The Parametric Map (highdicom ``ParametricMap``, float32) of the importance on
    ``view``, pixel-aligned with its source image ``reference``."""
    import copy

    from highdicom import (
        PixelMeasuresSequence,
        PlaneOrientationSequence,
        PlanePositionSequence,
        VOILUTTransformation,
    )
    from highdicom.pm import ParametricMap, RealWorldValueMapping
    from pydicom.sr.codedict import codes

    values = importance_on_view(run, view)
    spacing = _spacing(reference)
    frame = copy.deepcopy(reference)  # the map's own frame (see module docstring)
    frame.FrameOfReferenceUID = new_uid()
    origin = (spacing[1] / 2, spacing[0] / 2, 0.0)  # the first pixel's centre, mm
    frame.ImagePositionPatient = list(origin)  # read by highdicom to place the frame
    frame.ImageOrientationPatient = list(_ORIENTATION)
    frame.PixelSpacing = list(spacing)
    frame.SliceThickness = None  # a projection has none
    top = float(values.max()) if values.size else 0.0
    top = top if top > 0 else 1.0
    mapping = RealWorldValueMapping(
        lut_label="IMPORTANCE",
        lut_explanation="TopK-Patch importance w / sum w",
        unit=codes.UCUM.NoUnits,
        value_range=(0.0, top),
        slope=1.0,
        intercept=0.0,
        quantity_definition=private_code("TOPK-IMPORTANCE", "TopK-Patch importance"),
    )
    pmap = ParametricMap(
        source_images=[frame],
        pixel_array=values,
        series_instance_uid=series_uid,
        series_number=PM_SERIES_NUMBER,
        sop_instance_uid=new_uid(),
        instance_number=instance_number,
        contains_recognizable_visual_features=False,
        real_world_value_mappings=[mapping],
        voi_lut_transformations=[
            VOILUTTransformation(
                window_center=top / 2, window_width=top, voi_lut_function="LINEAR_EXACT"
            )
        ],
        content_label="IMPORTANCE",
        content_description=equipment.description(f"TopK-Patch importance, {view} view"),
        series_description=equipment.description("TopK-Patch importance"),
        pixel_measures=PixelMeasuresSequence(pixel_spacing=spacing, slice_thickness=None),
        plane_orientation=PlaneOrientationSequence("PATIENT", _ORIENTATION),
        plane_positions=[PlanePositionSequence("PATIENT", origin, pixel_matrix_position=(1, 1))],
        **equipment.keywords(),
    )
    return series_laterality(pmap, reference)
