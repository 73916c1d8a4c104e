"""One heatmap layer per slide and mode, updated in place, and the history of its prompts.

A new prompt on a slide replaces the data, limits, colour map, name and metadata of that
slide's heatmap layer for the mode (and its top-patch boxes) instead of adding a layer, so
overlays never stack. Earlier results stay in a ``HeatmapHistory`` and can be shown again
without any computation. Everything here runs on the GUI thread and only swaps prepared
arrays in: scores are computed by the job, the grids are small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from napari_medvl._layers import LayerData, heatmap_result_layers

__all__ = ["HeatmapHistory", "HistoryEntry", "find_overlay", "overlay_key", "show_overlay"]

HISTORY_LENGTH = 30


def overlay_key(slide_path: str, mode: str) -> str:
    """Identity of an overlay: one per (slide file, mode)."""
    return f"{slide_path}|{mode}"


def find_overlay(viewer: Any, key: str, layer_type: str = "image") -> Any:
    """The viewer's heatmap (``image``) or top-patch (``shapes``) layer of overlay ``key``."""
    for layer in viewer.layers:
        if layer.metadata.get("overlay_key") == key and type(layer).__name__.lower() == layer_type:
            return layer
    return None


def _set_if_changed(layer: Any, name: str, value: Any) -> None:
    # each assignment refreshes the layer on the GUI thread: skip the ones that change nothing
    current = getattr(layer, name)
    try:
        same = bool(np.all(np.asarray(current) == np.asarray(value)))
    except (TypeError, ValueError):
        same = False
    if not same:
        setattr(layer, name, value)


def _update_image(layer: Any, layer_data: LayerData) -> None:
    data, kwargs, _ = layer_data
    layer.metadata = kwargs["metadata"]
    _set_if_changed(layer, "scale", kwargs["scale"])
    _set_if_changed(layer, "translate", kwargs["translate"])
    layer.data = data
    low, high = kwargs["contrast_limits"]
    layer.contrast_limits_range = (min(low, high), max(low, high))
    _set_if_changed(layer, "contrast_limits", (low, high))
    if layer.colormap.name != kwargs["colormap"].name:
        layer.colormap = kwargs["colormap"]
    _set_if_changed(layer, "opacity", kwargs["opacity"])
    if layer.blending != kwargs["blending"]:
        layer.blending = kwargs["blending"]
    if layer.name != kwargs["name"]:
        layer.name = kwargs["name"]


def _update_boxes(layer: Any, layer_data: LayerData) -> None:
    """Replace a top-patch layer's rectangles, scores and name in place (removing a layer
    costs napari a full garbage collection on the GUI thread)."""
    data, kwargs, _ = layer_data
    layer.metadata = kwargs["metadata"]
    layer.selected_data = set()
    layer.data = [np.asarray(corners) for corners in data]
    layer.features = kwargs["features"]
    layer.edge_color = kwargs["edge_color"]
    layer.refresh_text()
    if layer.name != kwargs["name"]:
        layer.name = kwargs["name"]


def show_overlay(
    viewer: Any,
    outcome: Any,
    frame: Any,
    key: str,
    with_boxes: bool = True,
    **style: Any,
) -> Any:
    """Show a heatmap job's outcome as overlay ``key``: update its layer or add it once.

    ``style``: blending, colormap, opacity, threshold (see ``heatmap_layers``). With
    ``with_boxes`` the overlay's top-patch layer is replaced by the outcome's (removed when
    the outcome has none). Returns the heatmap image layer.
    """
    from napari.layers import Layer

    layers = heatmap_result_layers(outcome, frame, overlay_key=key, **style)
    image = find_overlay(viewer, key, "image")
    if image is None:
        image = viewer.add_layer(Layer.create(*layers[0]))
    else:
        _update_image(image, layers[0])
    if with_boxes:
        boxes = find_overlay(viewer, key, "shapes")
        if len(layers) > 1 and boxes is None:
            viewer.add_layer(Layer.create(*layers[1]))
            viewer.layers.selection.active = image
        elif len(layers) > 1:
            _update_boxes(boxes, layers[1])
        elif boxes is not None:
            viewer.layers.remove(boxes)
    return image


@dataclass(frozen=True)
class HistoryEntry:
    """One shown result: its label in the history list, the job's outcome and the world
    frame of its slide layer."""

    label: str
    slide_path: str
    outcome: Any
    frame: Any = None


@dataclass
class HeatmapHistory:
    """Results shown so far, newest first; an entry for the same slide, prompts, mode and
    normalisation replaces the older one."""

    entries: list[HistoryEntry] = field(default_factory=list)

    def add(self, slide_path: str, outcome: Any, frame: Any = None) -> HistoryEntry:
        request = outcome.request
        normalize = "" if request.normalization == "none" else f", {request.normalization}"
        label = f"{outcome.heatmap.prompt} ({request.mode}{normalize})"
        entry = HistoryEntry(label, slide_path, outcome, frame)
        self.entries = [e for e in self.entries if (e.slide_path, e.label) != (slide_path, label)]
        self.entries.insert(0, entry)
        del self.entries[HISTORY_LENGTH:]
        return entry

    def for_slide(self, slide_path: str | None) -> list[HistoryEntry]:
        return [entry for entry in self.entries if entry.slide_path == slide_path]
