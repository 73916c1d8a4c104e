"""TopK result layers: the importance map split onto the CC and MLO views, and ranked boxes.

The importance grid lives in the engine's breast image; each half is painted on a raster and
placed on its view's layer through ``breast.to_source`` (see :func:`importance_layers`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from napari_medvl._layer_frame import LayerData, WorldFrame, boxes_layer, layer_units

__all__ = [
    "IMPORTANCE_FLOOR",
    "TOPK_BOX_COLOR",
    "TOPK_BOX_TEXT",
    "importance_floor",
    "importance_layers",
    "topk_layers",
]

IMPORTANCE_FLOOR = 0.01
"""Cells whose importance is below this share of the map's largest cell are transparent: the
softmax gives every candidate some weight (down to 1e-13), and an additive colour map would
otherwise tint the whole view with its lowest colour."""


def importance_floor(importance: np.ndarray) -> float:
    """The value under which importance cells are hidden: :data:`IMPORTANCE_FLOOR` times the
    largest cell (0 for a map without a positive cell)."""
    peak = float(np.nanmax(importance)) if np.size(importance) else 0.0
    return IMPORTANCE_FLOOR * peak if peak > 0 else 0.0


def _raster_affine(
    breast: Any, view: str, frame: WorldFrame, step: float, origin_xy: tuple[float, float]
) -> np.ndarray:
    """3x3 affine from a raster's data (row, col) to world (y, x) on the view's layer.

    Raster pixel (r, c) is centred on breast px (x, y) = (origin_x + (c + 0.5) * step,
    origin_y + (r + 0.5) * step); ``breast.to_source`` takes it to the view's source px (the
    engine may crop, resize, flip or rotate the view), ``frame`` to world. The map is affine,
    so three pixel centres fix it.
    """
    pixels_rc = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    breast_xy = np.stack(
        [
            origin_xy[0] + (pixels_rc[:, 1] + 0.5) * step,
            origin_xy[1] + (pixels_rc[:, 0] + 0.5) * step,
        ],
        axis=1,
    )
    world_yx = frame.to_world(np.asarray(breast.to_source(view, breast_xy), dtype=np.float64))
    affine = np.eye(3)
    affine[:2, 0] = world_yx[1] - world_yx[0]  # one row down
    affine[:2, 1] = world_yx[2] - world_yx[0]  # one column right
    affine[:2, 2] = world_yx[0]
    return affine


_MAX_RASTER_PX = 2048
_CLIP_RASTER_PX = 512


def _raster_step(bounds: np.ndarray) -> float:
    """Largest step that puts every cell edge on a raster pixel edge (their widths' common
    divisor), unless that raster would exceed ``_MAX_RASTER_PX`` per axis; then span / limit
    (edges then land within half a step of the engine's)."""
    widths = np.diff(np.asarray(bounds, dtype=np.float64))
    span = float(bounds[-1] - bounds[0])
    tolerance = 1e-6 * span
    step = float(widths[0])
    for width in widths[1:]:
        a, b = max(step, float(width)), min(step, float(width))
        while b > tolerance:
            remainder = a % b
            a, b = b, (0.0 if min(remainder, b - remainder) <= tolerance else remainder)
        step = a
    if span / step > _MAX_RASTER_PX:
        return span / _MAX_RASTER_PX
    return step


def _cell_raster(
    grid: np.ndarray, row_bounds: np.ndarray, col_bounds: np.ndarray, step: float
) -> np.ndarray:
    """Cells of ``grid [R, C]`` with edges ``row_bounds [R + 1]``, ``col_bounds [C + 1]``
    painted on a uniform raster of ``step`` px starting at (col_bounds[0], row_bounds[0])."""

    def cell_of(bounds: np.ndarray) -> np.ndarray:
        count = int(round((bounds[-1] - bounds[0]) / step))
        centres = bounds[0] + (np.arange(count) + 0.5) * step
        cells: np.ndarray = np.clip(
            np.searchsorted(bounds, centres, side="right") - 1, 0, len(bounds) - 2
        )
        return cells

    raster: np.ndarray = grid[np.ix_(cell_of(row_bounds), cell_of(col_bounds))]
    return raster


def importance_layers(
    importance: np.ndarray,
    breast: Any,
    view_frames: dict[str, WorldFrame],
    name_prefix: str = "importance",
    opacity: float = 0.45,
    cell_bounds: np.ndarray | None = None,
) -> list[LayerData]:
    """The TopK importance map [G, G] over the breast image, split onto each source view.

    cell_bounds: the engine's cell edges ``[G + 1]`` in breast-image px (TopKResult.cell_bounds;
    the same on both axes); None means G equal cells of side S / G. Cells below
    :func:`importance_floor` are NaN (transparent) and the colour map starts at the floor (the
    metadata keeps the map's ``value_range`` and the floor as ``threshold``, which the colour
    bar names). Rows [0, G/2) are the CC
    half of the grid (CC on top), rows [G/2, G) the MLO half. Each half is painted on a uniform
    raster whose pixel edges include every cell edge, then placed on its view's layer with an
    affine built from the engine's ``breast.to_source``, so cells sit over the tissue they
    scored however the engine cropped, flipped or rotated the view.
    """
    grid = np.asarray(importance, dtype=np.float32)
    rows = grid.shape[0]
    side = float(np.asarray(breast.image).shape[0])
    if cell_bounds is None:
        bounds = np.linspace(0.0, side, rows + 1)
    else:
        bounds = np.asarray(cell_bounds, dtype=np.float64)
        if bounds.shape != (rows + 1,):
            raise ValueError(f"cell_bounds must hold {rows + 1} edges, got shape {bounds.shape}")
    step = _clip_step(_raster_step(bounds), float(bounds[-1] - bounds[0]))
    low, high = float(np.nanmin(grid)), float(np.nanmax(grid))
    floor = importance_floor(grid)
    if floor > low:  # cells below the floor: NaN, drawn transparent
        grid = np.where(grid >= floor, grid, np.float32(np.nan)).astype(np.float32)
    bottom = max(low, floor)
    limits = (bottom, high if high > bottom else bottom + 1e-6)  # a flat map shows no overlay
    layers: list[LayerData] = []
    for view, (row_lo, row_hi) in (("CC", (0, rows // 2)), ("MLO", (rows // 2, rows))):
        if view not in view_frames:
            continue
        frame = view_frames[view]
        row_bounds = bounds[row_lo : row_hi + 1]
        raster, origin = _clip_to_view(
            _cell_raster(grid[row_lo:row_hi], row_bounds, bounds, step),
            (float(bounds[0]), float(row_bounds[0])),
            step,
            breast,
            view,
        )
        kwargs = {
            "name": f"{name_prefix} {view}",
            "colormap": "inferno",
            "opacity": opacity,
            "blending": "additive",
            "contrast_limits": limits,
            "interpolation2d": "nearest",
            "units": layer_units(frame),
            "affine": _raster_affine(breast, view, frame, step, origin),
            "metadata": {
                "medvl_kind": "importance",
                "view": view,
                "world_frame": frame.as_dict(),
                "value_range": (low, high),
                "threshold": floor if floor > low else None,
            },
        }
        layers.append((raster, kwargs, "image"))
    return layers


def _clip_step(step: float, span: float) -> float:
    """``step`` divided by the largest integer that keeps it >= 1 breast px and the raster
    within ``_CLIP_RASTER_PX`` per axis: clipping to the view then cuts at most one raster px
    (1 px of a 512 px breast image, 3 px of a 1536 px one)."""
    divisor = max(1, min(int(step), int(_CLIP_RASTER_PX * step // span)))
    return step / divisor


def _clip_to_view(
    raster: np.ndarray, origin_xy: tuple[float, float], step: float, breast: Any, view: str
) -> tuple[np.ndarray, tuple[float, float]]:
    """The raster pixels [R, C] that lie inside the view's source image, and their origin.

    The breast image pads each view to its slot; that padding maps outside the source image,
    and a layer reaching past its view widens the viewer's range (a redraw of every layer).
    Breasts without ``placements`` (the source size) are returned whole.
    """
    placement = getattr(breast, "placements", {}).get(view)
    if placement is None:
        return raster, origin_xy
    height, width = placement.source_shape
    x0, y0, x1, y1 = breast.boxes_from_source(view, [[0.0, 0.0, width, height]])[0]
    tolerance = 1e-6

    def kept(low: float, high: float, origin: float, count: int) -> tuple[int, int]:
        first = int(np.ceil((low - origin) / step - tolerance))
        stop = int(np.floor((high - origin) / step + tolerance))
        return max(first, 0), min(max(stop, 0), count)

    row_first, row_stop = kept(y0, y1, origin_xy[1], raster.shape[0])
    col_first, col_stop = kept(x0, x1, origin_xy[0], raster.shape[1])
    if row_stop <= row_first or col_stop <= col_first:
        return raster, origin_xy
    clipped = raster[row_first:row_stop, col_first:col_stop]
    return clipped, (origin_xy[0] + col_first * step, origin_xy[1] + row_first * step)


TOPK_BOX_COLOR = "lime"
TOPK_BOX_TEXT = "#{rank} {score:.3f}"


def topk_layers(
    result: Any,
    breast: Any,
    view_frames: dict[str, WorldFrame],
    laterality: str | None = None,
    sources: dict[str, str] | None = None,
    run: Any = None,
) -> list[LayerData]:
    """Layers for a TopK result: boxes on each source view plus the importance map.

    ``result`` follows medvl_engine.models.topksiglip_results.TopKResult (boxes / ranks / scores
    per view in that view's source px (x0, y0, x1, y1)); ``view_frames`` holds the world
    frame of the CC and MLO image layers (their side-by-side offsets). The result, the
    breast image, the ``sources`` (view -> file) and the ``run`` (the dock's
    :class:`medvl_engine.models.topksiglip_results.TopKRunSummary`, the demo's BreastTopK; for
    the DICOM exports; None when not at hand) stay in each layer's metadata for exports.
    """
    context = {"medvl_kind": "topk", "topk_result": result, "breast": breast, "topk_run": run}
    context["sources"] = dict(sources or {})
    prefix = f"TopK {laterality}" if laterality else "TopK"
    layers = importance_layers(
        result.importance,
        breast,
        view_frames,
        name_prefix=f"{prefix} importance",
        cell_bounds=getattr(result, "cell_bounds", None),
    )
    for _, kwargs, _ in layers:
        kwargs["metadata"].update(context)
    for view in ("CC", "MLO"):
        if view not in view_frames:
            continue
        layers.append(
            boxes_layer(
                result.boxes[view],
                result.scores[view],
                view_frames[view],
                name=f"{prefix} boxes {view}",
                edge_color=TOPK_BOX_COLOR,
                text_format=TOPK_BOX_TEXT,
                ranks=result.ranks[view],
                extra_features={"view": [view] * len(result.scores[view])},
            )
        )
        layers[-1][1]["metadata"].update(context)
    return layers
