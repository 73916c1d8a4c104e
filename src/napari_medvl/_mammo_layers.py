"""TopK layers a reader can read on any map: rank labels on dark plates, boxes with a dark rim.

The importance map takes the shared sequential colour map (:mod:`medvl_engine.colormaps`).

Builds on :func:`napari_medvl._topk_layers.topk_layers` (importance maps and ranked boxes in each
view's world frame) and draws each view's boxes as one shapes layer (:func:`marks_layer`): the
box outline over a dark rim (a wider dark rectangle) so a lime box stays visible on a bright or
lime-coloured importance map, and one filled dark plate in a corner band of every box (placed
in rank order so that plates of overlapping boxes never cover each other), drawn over the
boxes, with the rank and score in white on it.

``pending_topk_layers`` gives the same layers empty and invisible, in the same order, for the
views a result will be drawn on: the TopK dock adds them before any result, so a result only
fills them (see :mod:`._event_turns`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from medvl_engine.colormaps import SEQUENTIAL_MAP
from napari_medvl._event_turns import GLYPH_RANKS, GLYPHS_SCORE
from napari_medvl._heatmap_layers import TOP_PATCH_OPACITY
from napari_medvl._layer_frame import LayerData, WorldFrame, boxes_layer, layer_units
from napari_medvl._topk_layers import TOPK_BOX_COLOR, TOPK_BOX_TEXT, topk_layers

__all__ = [
    "LABEL_COLOR",
    "MARK_PARTS",
    "PENDING_SUFFIX",
    "PLATE_COLOR",
    "TOPK_PENDING_KIND",
    "marks_layer",
    "pending_topk_layers",
    "readable_topk_layers",
    "shared_colormap",
]

PLATE_COLOR = "#000000cc"  # black at 80 % opacity
RIM_COLOR = (0.0, 0.0, 0.0, 0.8)
MARK_PARTS = ("rim", "box", "label")
"""The shapes of a TopK marks layer, in drawing order: K dark rims, K boxes, K label plates."""
LABEL_COLOR = "white"
_PLATE_FRACTION = 0.22  # of the box height
TOPK_PENDING_KIND = "topk_pending"  # medvl_kind of a TopK layer no result has filled yet
PENDING_SUFFIX = " (Run to compute)"  # a pending layer's name: its result's name + this


def shared_colormap(name: str) -> Any:
    """napari Colormap of the engine's look-up table ``name`` (the map exports use)."""
    from napari.utils.colormaps import Colormap

    from medvl_engine.colormaps import colormap_lut

    return Colormap(colors=colormap_lut(name), name=f"medvl {name}")


def _plate_candidates(box: np.ndarray) -> list[np.ndarray]:
    """Plate positions inside one box, preferred first: top-left, bottom-left, top-right,
    bottom-right quarter-height bands of half the box width, as [x0, y0, x1, y1]."""
    x0, y0, x1, y1 = box
    band = (y1 - y0) * _PLATE_FRACTION
    half = (x1 - x0) / 2.0
    return [
        np.array([x0, y0, x0 + half, y0 + band]),
        np.array([x0, y1 - band, x0 + half, y1]),
        np.array([x0 + half, y0, x1, y0 + band]),
        np.array([x0 + half, y1 - band, x1, y1]),
    ]


def _overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3])


def place_plates(boxes_xyxy: np.ndarray, ranks: np.ndarray | None = None) -> np.ndarray:
    """Label plates [K, 4] (x0, y0, x1, y1), each inside its box [K, 4], placed greedily from
    rank 1 on so that no plate covers a better-ranked one (boxes of overlapping patches share
    corners). Returned in the boxes' order."""
    boxes = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    order = np.arange(len(boxes)) if ranks is None else np.argsort(ranks, kind="stable")
    plates = np.zeros_like(boxes)
    placed: list[np.ndarray] = []
    for index in order:
        candidates = _plate_candidates(boxes[index])
        free = [c for c in candidates if not any(_overlaps(c, other) for other in placed)]
        plates[index] = free[0] if free else candidates[0]
        placed.append(plates[index])
    return plates


def _plate_rectangles(
    boxes_xyxy: np.ndarray, frame: WorldFrame, ranks: np.ndarray | None = None
) -> list[np.ndarray]:
    rectangles = []
    for x0, y0, x1, y1 in place_plates(boxes_xyxy, ranks):
        corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
        rectangles.append(frame.to_world(corners))
    return rectangles


def _rgba(color: Any, alpha_scale: float = 1.0) -> np.ndarray:
    from napari.utils.colormaps.standardize_color import transform_color

    rgba = np.array(transform_color(color)[0], dtype=np.float64)
    rgba[3] *= alpha_scale
    return rgba


def marks_layer(boxes_data: LayerData, frame: WorldFrame, text_format: str) -> LayerData:
    """One shapes layer for a view's ranked boxes [K]: a dark rim under each box, the box, and
    a dark label plate in a corner band of the box (placed in rank order so plates of
    overlapping boxes never cover each other) with the rank and score in white. 3K rectangles
    in that order (features ``part`` in :data:`MARK_PARTS`, ``rank``, ``score``, ``label``:
    the text, on plates only); one layer instead of three, which napari draws at a fraction
    of the cost (``bench/bench_first_topk.py``)."""
    rectangles, kwargs, _ = boxes_data
    count = len(rectangles)
    ranks = np.asarray(kwargs["features"]["rank"])
    scores = np.asarray(kwargs["features"]["score"])
    plates = _plate_rectangles(kwargs["metadata"]["boxes_xyxy"], frame, ranks)
    width = float(kwargs["edge_width"])
    box = _rgba(kwargs["edge_color"], TOP_PATCH_OPACITY)
    plate = _rgba(PLATE_COLOR, TOP_PATCH_OPACITY)
    clear = np.zeros(4)
    labels = [
        text_format.format(rank=int(r), score=float(v)) for r, v in zip(ranks, scores, strict=True)
    ]
    marks_kwargs: dict[str, Any] = {
        **{key: kwargs[key] for key in ("name", "units", "metadata") if key in kwargs},
        "shape_type": "rectangle",
        "edge_width": [width * 2.0] * count + [width] * count + [0.0] * count,
        "edge_color": np.array([RIM_COLOR] * count + [box] * count + [plate] * count)
        if count
        else "transparent",  # napari reads an empty [0, 4] colour array as illegal
        "face_color": np.array([clear] * (2 * count) + [plate] * count) if count else "transparent",
        "opacity": 1.0,
        "features": {
            "part": np.repeat(np.array(MARK_PARTS), count),
            "rank": np.tile(ranks, 3),
            "score": np.tile(scores, 3),
            "label": np.array([""] * (2 * count) + labels, dtype=object),
        },
        "text": {"string": "{label}", "color": LABEL_COLOR, "anchor": "upper_left", "size": 9},
    }
    data = [np.array(r) for r in rectangles] * 2 + [np.array(p) for p in plates]
    return data, marks_kwargs, "shapes"


def readable_topk_layers(
    result: Any,
    breast: Any,
    view_frames: dict[str, WorldFrame],
    laterality: str | None = None,
    sources: dict[str, str] | None = None,
    model: str | None = None,
    run: Any = None,
) -> list[LayerData]:
    """TopK layers in drawing order: importance, then per view its marks (box rims, boxes and
    label plates in one shapes layer, named ``... boxes <view>``: :func:`marks_layer`).

    The importance maps name
    the ``model`` that made them and its demo notice (for their colour bar); ``run`` (the
    engine's BreastTopK) joins every layer's metadata as ``topk_run``.
    """
    from medvl_engine.demo_models import demo_notice_for

    notice = demo_notice_for(model)
    layers: list[LayerData] = []
    for data in topk_layers(result, breast, view_frames, laterality, sources=sources, run=run):
        _, kwargs, layer_type = data
        view = str(kwargs["name"]).rsplit(" ", 1)[-1]
        if layer_type == "image":  # importance: the shared sequential map, as in exports
            kwargs["colormap"] = shared_colormap(SEQUENTIAL_MAP)
            kwargs["metadata"].update(
                {
                    "colormap": SEQUENTIAL_MAP,
                    "prompt": "TopK importance w / sum w",
                    "mode": "importance",
                    "normalize": "none",
                    "value_range": tuple(
                        float(v)
                        for v in kwargs["metadata"].get("value_range", kwargs["contrast_limits"])
                    ),
                    "model": model,
                    "demo_notice": notice,
                }
            )
        if layer_type != "shapes" or view not in view_frames:
            layers.append(data)
            continue
        layers.append(marks_layer(data, view_frames[view], TOPK_BOX_TEXT))
    return layers


def _pending(data: LayerData) -> LayerData:
    """``data`` as a pending layer: invisible (opacity 0), named after its result."""
    values, kwargs, layer_type = data
    name = str(kwargs["name"])
    kwargs = {**kwargs, "name": name + PENDING_SUFFIX, "opacity": 0.0}
    kwargs["metadata"] = {"medvl_kind": TOPK_PENDING_KIND, "result_name": name}
    if layer_type == "shapes":
        kwargs["metadata"]["label_format"] = TOPK_BOX_TEXT  # how show_glyph_rank labels it
    return values, kwargs, layer_type


def _pending_importance(name: str, frame: WorldFrame) -> LayerData:
    """One transparent (NaN) cell of one source px at the view's origin, placed by an affine
    as a result's importance map is (so the result's affine alone places the result)."""
    transform = frame.image_transform()
    affine = np.diag([*transform["scale"], 1.0])
    affine[:2, 2] = transform["translate"]
    kwargs = {
        "name": name,
        "colormap": shared_colormap(SEQUENTIAL_MAP),
        "blending": "additive",
        "contrast_limits": (0.0, 1.0),
        "interpolation2d": "nearest",
        "units": layer_units(frame),
        "affine": affine,
    }
    return _pending((np.full((1, 1), np.nan, dtype=np.float32), kwargs, "image"))


def pending_topk_layers(
    view_frames: dict[str, WorldFrame], laterality: str | None = None
) -> list[LayerData]:
    """Empty, invisible TopK layers for the CC and MLO views in ``view_frames``, in the order
    and under the names (plus ``PENDING_SUFFIX``) of :func:`readable_topk_layers`.

    Each shapes layer holds one box of one source px near its view's origin; the labels
    layer's label is rank ``GLYPH_RANKS[0]`` (``_event_turns.show_glyphs`` shows the next
    ones), so napari renders the glyphs of rank labels before any result.
    """
    prefix = f"TopK {laterality}" if laterality else "TopK"
    views = [view for view in ("CC", "MLO") if view in view_frames]
    layers = [
        _pending_importance(f"{prefix} importance {view}", view_frames[view]) for view in views
    ]
    for view in views:
        boxes = boxes_layer(
            np.array([[1.0, 1.0, 2.0, 2.0]]),  # inside the view's extent: filling it moves no range
            [GLYPHS_SCORE],
            view_frames[view],
            name=f"{prefix} boxes {view}",
            edge_color=TOPK_BOX_COLOR,
            text_format=TOPK_BOX_TEXT,
            ranks=[GLYPH_RANKS[0]],
        )
        layers.append(_pending(marks_layer(boxes, view_frames[view], TOPK_BOX_TEXT)))
    return layers
