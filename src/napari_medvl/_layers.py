"""Pure layer builders: engine objects in, napari LayerData tuples out.

Nothing here needs a viewer. Each builder returns ``(data, kwargs, layer_type)``,
the tuple napari readers return and ``napari.layers.Layer.create(*tuple)`` takes.

World frame (the one every slide layer shares): micrometres when the slide has
an mpp, else level-0 pixels, origin at the top-left corner of the slide. A
level-0 pixel (col, row) covers ``[col, col + 1) x [row, row + 1)`` in level-0 px,
so an image layer whose pixel centres napari puts at integer data coordinates
gets a half-pixel translate; boxes in level-0 px (x0, y0, x1, y1) map to world
by a plain multiplication with the mpp. Mammograms live in source-image pixels,
each view shifted right by ``offset_x`` so that views sit side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "LayerData",
    "SLIDE_KIND",
    "MAMMOGRAM_KIND",
    "WorldFrame",
    "slide_frame",
    "slide_layer",
    "mammogram_layers",
    "boxes_layer",
    "grid_image_layer",
    "heatmap_layers",
    "heatmap_result_layers",
    "importance_layers",
    "topk_layers",
    "TOP_PATCH_TEXT",
]

LayerData = tuple[Any, dict[str, Any], str]

SLIDE_KIND = "slide"
MAMMOGRAM_KIND = "mammogram"
MAMMOGRAM_GAP_PX = 64


@dataclass(frozen=True)
class WorldFrame:
    """Map from a source image's pixel frame to napari world coordinates.

    ``world (y, x) = (offset_y + y_px * scale_y, offset_x + x_px * scale_x)`` where
    (x_px, y_px) are pixel-edge coordinates (level-0 px for slides, source px
    for mammograms). ``units`` is "um" or "px".
    """

    scale_y: float = 1.0
    scale_x: float = 1.0
    offset_y: float = 0.0
    offset_x: float = 0.0
    units: str = "px"

    def to_world(self, points_xy: np.ndarray) -> np.ndarray:
        """Points [N, 2] (x, y) in source px -> [N, 2] (y, x) in world units."""
        points = np.asarray(points_xy, dtype=np.float64).reshape(-1, 2)
        world_y = self.offset_y + points[:, 1] * self.scale_y
        world_x = self.offset_x + points[:, 0] * self.scale_x
        return np.stack([world_y, world_x], axis=1)

    def image_transform(self, step_y: float = 1.0, step_x: float = 1.0) -> dict[str, tuple]:
        """napari ``scale``/``translate`` for an image whose pixel is step_y x step_x source px.

        The image's pixel (0, 0) covers source px [0, step) on both axes, so its
        centre (napari's data coordinate 0) sits at half a step.
        """
        scale = (step_y * self.scale_y, step_x * self.scale_x)
        translate = (self.offset_y + scale[0] / 2.0, self.offset_x + scale[1] / 2.0)
        return {"scale": scale, "translate": translate}

    def as_dict(self) -> dict[str, Any]:
        return {
            "scale_y": self.scale_y,
            "scale_x": self.scale_x,
            "offset_y": self.offset_y,
            "offset_x": self.offset_x,
            "units": self.units,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> WorldFrame:
        return cls(**{key: values[key] for key in cls.__dataclass_fields__ if key in values})


def _units(frame: WorldFrame) -> tuple[str, str]:
    """napari layer units for a frame, so the scale bar reads um on slides with an mpp."""
    return ("um", "um") if frame.units == "um" else ("pixel", "pixel")


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
        "units": _units(frame),
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


def boxes_layer(
    boxes_xyxy: np.ndarray,
    scores: Sequence[float],
    frame: WorldFrame,
    name: str,
    edge_color: str = "yellow",
    text_format: str = "#{rank} {score:.2f}",
    extra_features: dict[str, Sequence[Any]] | None = None,
    ranks: Sequence[int] | None = None,
) -> LayerData:
    """Rectangles for boxes [N, 4] (x0, y0, x1, y1) in the frame's source px.

    Returns a shapes layer whose rectangles are [N, 4, 2] (y, x) world corners,
    with features ``rank`` (1 = best), ``score`` and the text ``text_format``.
    Boxes are drawn in the order given; ranks follow descending score unless
    ``ranks`` are given.
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    score_array = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(score_array) != len(boxes):
        raise ValueError(f"{len(boxes)} boxes but {len(score_array)} scores")
    if ranks is None:
        order = np.argsort(-score_array, kind="stable")
        rank_array = np.empty(len(boxes), dtype=np.int64)
        rank_array[order] = np.arange(1, len(boxes) + 1)
    else:
        rank_array = np.asarray(ranks, dtype=np.int64).reshape(-1)
    rectangles = []
    for x0, y0, x1, y1 in boxes:
        corners_xy = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
        rectangles.append(frame.to_world(corners_xy))
    features: dict[str, Any] = {"rank": rank_array, "score": score_array}
    for key, values in (extra_features or {}).items():
        features[key] = list(values)
    kwargs = {
        "name": name,
        "shape_type": "rectangle",
        "edge_color": edge_color,
        "face_color": "transparent",
        "edge_width": max(frame.scale_x, frame.scale_y) * 4.0,
        "units": _units(frame),
        "features": features,
        "text": {"string": text_format, "color": edge_color, "anchor": "upper_left", "size": 9},
        "metadata": {"boxes_xyxy": boxes, "world_frame": frame.as_dict()},
    }
    return rectangles, kwargs, "shapes"


def grid_image_layer(
    grid: np.ndarray,
    frame: WorldFrame,
    cell_size_px: float | tuple[float, float],
    origin_px: tuple[float, float] = (0.0, 0.0),
    name: str = "heatmap",
    colormap: str = "turbo",
    opacity: float = 0.5,
    contrast_limits: tuple[float, float] | None = None,
    blending: str = "translucent",
    metadata: dict[str, Any] | None = None,
) -> LayerData:
    """Image layer for a score grid [rows, cols] laid over a source image.

    Cell (row, col) covers source px x in [ox + col * sx, ox + (col + 1) * sx)
    and y likewise, with ``origin_px`` = (ox, oy) and ``cell_size_px`` = s or
    (sx, sy). NaN cells (no tissue) stay transparent.
    """
    values = np.asarray(grid, dtype=np.float32)
    if values.ndim != 2:
        raise ValueError(f"score grid must be 2-D [rows, cols], got shape {values.shape}")
    step_x, step_y = (
        (float(cell_size_px), float(cell_size_px))
        if np.isscalar(cell_size_px)
        else (float(cell_size_px[0]), float(cell_size_px[1]))
    )
    shifted = WorldFrame(
        scale_y=frame.scale_y,
        scale_x=frame.scale_x,
        offset_y=frame.offset_y + origin_px[1] * frame.scale_y,
        offset_x=frame.offset_x + origin_px[0] * frame.scale_x,
        units=frame.units,
    )
    if contrast_limits is None:
        finite = values[np.isfinite(values)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        contrast_limits = (low, high if high > low else low + 1.0)
    kwargs = {
        "name": name,
        "colormap": colormap,
        "opacity": opacity,
        "blending": blending,
        "contrast_limits": tuple(float(v) for v in contrast_limits),
        "interpolation2d": "nearest",
        "units": _units(frame),
        "metadata": {**(metadata or {}), "world_frame": shifted.as_dict()},
        **shifted.image_transform(step_y, step_x),
    }
    return values, kwargs, "image"


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
        return np.clip(np.searchsorted(bounds, centres, side="right") - 1, 0, len(bounds) - 2)

    return grid[np.ix_(cell_of(row_bounds), cell_of(col_bounds))]


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
    the same on both axes); None means G equal cells of side S / G. Rows [0, G/2) are the CC
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
    limits = (low, high if high > low else low + 1e-6)  # a flat map shows as no overlay
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
            "units": _units(frame),
            "affine": _raster_affine(breast, view, frame, step, origin),
            "metadata": {
                "medvl_kind": "importance",
                "view": view,
                "world_frame": frame.as_dict(),
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
) -> list[LayerData]:
    """Layers for a TopK result: boxes on each source view plus the importance map.

    ``result`` follows medvl_engine.models.topksiglip_inference.TopKResult (boxes / ranks / scores
    per view in that view's source px (x0, y0, x1, y1)); ``view_frames`` holds the world
    frame of the CC and MLO image layers (their side-by-side offsets). The result, the
    breast image and the ``sources`` (view -> file) stay in each layer's metadata for
    exports.
    """
    context = {"medvl_kind": "topk", "topk_result": result, "breast": breast}
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


def heatmap_layers(
    heatmap: Any,
    top_patches: tuple[np.ndarray, np.ndarray] | None,
    frame: WorldFrame,
    prompt: str | None = None,
    colormap: str = "auto",
    opacity: float = 0.5,
    blending: str = "translucent",
    store: Any = None,
    slide: Any = None,
    threshold: float | None = None,
    model: str | None = None,
    overlay_key: str | None = None,
) -> list[LayerData]:
    """Image layer of an engine Heatmap plus a shapes layer of its top patches.

    The image takes ``heatmap.scale``/``heatmap.translate`` as the engine computed them
    (napari (y, x), in the slide's world units); the top patches (boxes (x0, y0, x1, y1)
    level-0 px, scores) are drawn through the slide's ``frame``. Colours follow
    ``_overlay_style.overlay_view``: the shared colour maps ("auto": diverging and symmetric
    about 0 for signed maps), cells below ``threshold`` hidden. The feature ``store``, ``slide``,
    ``model`` and its demo notice are kept in the heatmap's metadata for exports and the
    colour bar; ``overlay_key`` names the (slide, mode) overlay the layer is updated in place for.
    """
    from napari_medvl._overlay_style import OverlayStyle, napari_colormap, overlay_view

    label = prompt if prompt is not None else heatmap.prompt
    view = overlay_view(
        heatmap.grid,
        heatmap.mode,
        heatmap.normalize,
        heatmap.value_range,
        OverlayStyle(colormap=colormap, opacity=opacity, blending=blending, threshold=threshold),
    )
    image_kwargs = {
        "name": f"heatmap: {label}",
        "colormap": napari_colormap(view.colormap),
        "opacity": opacity,
        "blending": blending,
        "contrast_limits": view.contrast_limits,
        "interpolation2d": "nearest",
        "units": _units(frame),
        "scale": tuple(float(v) for v in heatmap.scale),
        "translate": tuple(float(v) for v in heatmap.translate),
        "metadata": {
            "medvl_kind": "heatmap",
            "prompt": label,
            "mode": heatmap.mode,
            "normalize": heatmap.normalize,
            "heatmap": heatmap,
            "top_patches": top_patches,
            "feature_store": store,
            "slide": slide,
            "world_frame": frame.as_dict(),
            "colormap": view.colormap,
            "signed": view.signed,
            "value_range": view.value_range,
            "threshold": threshold,
            "model": model,
            "demo_notice": _demo_notice(model),
            "overlay_key": overlay_key,
        },
    }
    layers: list[LayerData] = [(view.data, image_kwargs, "image")]
    if top_patches is not None:
        boxes, scores = top_patches
        colors = rank_label_colors(boxes, frame, image_kwargs, view.data, opacity)
        layers.append(
            boxes_layer(
                boxes,
                scores,
                frame,
                name=f"top patches: {label}",
                edge_color=RANK_LABEL_COLOR,
                text_format=TOP_PATCH_TEXT,
                extra_features={"label_color": colors},
            )
        )
        layers[-1][1]["metadata"]["overlay_key"] = overlay_key
        layers[-1][1]["opacity"] = TOP_PATCH_OPACITY
        layers[-1][1]["text"] = rank_label_text(layers[-1][1]["text"]["string"])
    return layers


def rank_label_text(text_format: str) -> dict[str, Any]:
    """napari text of a top-patch layer: ``text_format``, each label in its ``label_color``."""
    return {
        "string": text_format,
        "color": {"feature": "label_color"},
        "anchor": "upper_left",
        "size": RANK_LABEL_SIZE,
    }


_TISSUE_LUMINANCE = 0.75  # H&E under a translucent overlay: a light pink


def rank_label_colors(
    boxes_xyxy: np.ndarray,
    frame: WorldFrame,
    image_kwargs: dict[str, Any],
    grid: np.ndarray,
    opacity: float,
) -> list[str]:
    """ "black" or "white" per box [N, 4] (x0, y0, x1, y1) level-0 px: whichever contrasts
    with the heatmap cell under the box's centre as drawn (its colour at ``opacity`` over
    light tissue; relative luminance L = 0.2126 R + 0.7152 G + 0.0722 B, black above 0.5).

    ``grid`` [R, C] is the layer's data and ``image_kwargs`` its scale, translate, contrast
    limits and colour map; a hidden (NaN) cell or one off the grid counts as tissue.
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    if not len(boxes):
        return []
    centres = frame.to_world(np.column_stack([boxes[:, [0, 2]].mean(1), boxes[:, [1, 3]].mean(1)]))
    scale = np.asarray(image_kwargs["scale"], dtype=np.float64)
    origin = np.asarray(image_kwargs["translate"], dtype=np.float64) - scale / 2.0
    cells = np.floor((centres - origin) / scale).astype(np.int64)
    inside = np.all((cells >= 0) & (cells < np.asarray(grid.shape[:2])), axis=1)
    values = np.full(len(boxes), np.nan)
    values[inside] = grid[cells[inside, 0], cells[inside, 1]]
    low, high = image_kwargs["contrast_limits"]
    normalised = np.clip((values - low) / (high - low if high > low else 1.0), 0.0, 1.0)
    rgba = np.asarray(image_kwargs["colormap"].map(np.nan_to_num(normalised)), dtype=np.float64)
    luminance = rgba[:, :3] @ np.array([0.2126, 0.7152, 0.0722])
    shown = opacity * luminance + (1.0 - opacity) * _TISSUE_LUMINANCE
    shown[~np.isfinite(values)] = _TISSUE_LUMINANCE
    return ["black" if value > 0.5 else "white" for value in shown]


TOP_PATCH_TEXT = "#{rank}\n{score:.2f}"
"""A top patch's rank label: the rank over the score, about four characters wide, so the labels
of side-by-side patches stay apart down to a patch about five characters wide on screen."""

# Magenta is in neither shared map (viridis, blue-white-red), so boxes stay visible over any
# cell of the heatmap; rank labels take black or white by the cell under them.
RANK_LABEL_COLOR = "magenta"
RANK_LABEL_SIZE = 11  # text points; each label black or white, whichever its cell contrasts
TOP_PATCH_OPACITY = 0.7  # napari's default for shapes, stated: a pending layer starts at 0


def _demo_notice(model: str | None) -> str | None:
    if not model:
        return None
    from medvl_engine.demo_models import demo_notice_for

    return demo_notice_for(model)


def heatmap_result_layers(
    outcome: Any,
    frame: dict[str, Any] | WorldFrame | None,
    blending: str = "translucent",
    **style: Any,
) -> list[LayerData]:
    """Layers for a heatmap job's outcome (``heatmap``, ``top_patches``) on a slide's frame.

    ``style`` passes on to :func:`heatmap_layers` (colormap, opacity, threshold, overlay_key).
    """
    if frame is None:
        world = WorldFrame(units=outcome.heatmap.units)
    elif isinstance(frame, WorldFrame):
        world = frame
    else:
        world = WorldFrame.from_dict(frame)
    return heatmap_layers(
        outcome.heatmap,
        outcome.top_patches,
        world,
        blending=blending,
        store=getattr(outcome, "store", None),
        slide=getattr(getattr(outcome, "request", None), "slide", None),
        model=getattr(getattr(outcome, "request", None), "model", None),
        **style,
    )
