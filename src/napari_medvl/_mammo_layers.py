"""TopK layers a reader can read on any map: rank labels on dark plates, boxes with a dark rim.

The importance map takes the shared sequential colour map (:mod:`medvl_engine._colormap`).

Builds on :func:`napari_medvl._layers.topk_layers` (importance maps and ranked boxes in each
view's world frame) and adds, per view, a ``labels`` shapes layer: one filled dark plate across
the top band of every box, drawn under the boxes, with the rank and score in white on it. The
box outline gets a dark rim (a wider dark rectangle under the coloured one) so a lime box stays
visible on a bright or lime-coloured importance map.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from napari_medvl._layers import LayerData, WorldFrame, topk_layers

__all__ = ["PLATE_COLOR", "LABEL_COLOR", "readable_topk_layers", "shared_colormap"]

PLATE_COLOR = "#000000cc"  # black at 80 % opacity
LABEL_COLOR = "white"
_PLATE_FRACTION = 0.22  # of the box height


def shared_colormap(name: str) -> Any:
    """napari Colormap of the engine's look-up table ``name`` (the map exports use)."""
    from napari.utils.colormaps import Colormap

    from medvl_engine._colormap import colormap_lut

    return Colormap(colors=colormap_lut(name), name=f"medvl {name}")


def _plate_rectangles(boxes_xyxy: np.ndarray, frame: WorldFrame) -> list[np.ndarray]:
    rectangles = []
    for x0, y0, x1, y1 in np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4):
        band = (y1 - y0) * _PLATE_FRACTION
        corners = np.array([[x0, y0], [x1, y0], [x1, y0 + band], [x0, y0 + band]])
        rectangles.append(frame.to_world(corners))
    return rectangles


def _labels_layer(boxes_data: LayerData, frame: WorldFrame) -> LayerData:
    rectangles, kwargs, _ = boxes_data
    boxes = kwargs["metadata"]["boxes_xyxy"]
    plates = _plate_rectangles(boxes, frame)
    labels_kwargs = {
        "name": kwargs["name"].replace(" boxes ", " labels "),
        "shape_type": "rectangle",
        "edge_width": 0,
        "edge_color": PLATE_COLOR,
        "face_color": PLATE_COLOR,
        "units": kwargs.get("units"),
        "features": {key: np.asarray(value) for key, value in kwargs["features"].items()},
        "text": {
            "string": kwargs["text"]["string"],
            "color": LABEL_COLOR,
            "anchor": "upper_left",
            "size": 9,
        },
        "metadata": {**kwargs["metadata"], "medvl_kind": "topk_labels"},
    }
    return plates, labels_kwargs, "shapes"


def _rim_layer(boxes_data: LayerData) -> LayerData:
    rectangles, kwargs, _ = boxes_data
    rim_kwargs = {
        "name": kwargs["name"].replace(" boxes ", " box rims "),
        "shape_type": "rectangle",
        "edge_color": "black",
        "face_color": "transparent",
        "edge_width": kwargs["edge_width"] * 2.0,
        "opacity": 0.8,
        "units": kwargs.get("units"),
        "metadata": {"medvl_kind": "topk_rims"},
    }
    return [np.array(r) for r in rectangles], rim_kwargs, "shapes"


def readable_topk_layers(
    result: Any,
    breast: Any,
    view_frames: dict[str, WorldFrame],
    laterality: str | None = None,
    sources: dict[str, str] | None = None,
) -> list[LayerData]:
    """TopK layers in drawing order: importance, then per view box rims, boxes, label plates.

    The boxes layer keeps its rank/score features but no text of its own; the labels layer
    carries the same features and the text, white on dark plates.
    """
    from medvl_engine._colormap import SEQUENTIAL_MAP

    layers: list[LayerData] = []
    for data in topk_layers(result, breast, view_frames, laterality, sources=sources):
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
                    "value_range": tuple(float(v) for v in kwargs["contrast_limits"]),
                }
            )
        if layer_type != "shapes" or view not in view_frames:
            layers.append(data)
            continue
        labelled = dict(kwargs)
        labelled["text"] = {**kwargs["text"], "visible": False}
        layers.append(_rim_layer(data))
        layers.append((data[0], labelled, layer_type))
        layers.append(_labels_layer(data, view_frames[view]))
    return layers
