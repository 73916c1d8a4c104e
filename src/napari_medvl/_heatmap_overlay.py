"""One heatmap layer per slide and mode, updated in place, and the history of its prompts.

A new prompt on a slide replaces the data, limits, colour map, name and metadata of that
slide's heatmap layer for the mode (and its top-patch boxes) instead of adding a layer, so
overlays never stack. Earlier results stay in a ``HeatmapHistory`` and can be shown again
without any computation. Everything here runs on the GUI thread and only swaps prepared
arrays in: scores are computed by the job, the grids are small.

Adding a layer costs napari 0.3 - 0.8 s on the GUI thread (its canvas visual, its controls,
its shaders and, for the rank labels, every glyph drawn the first time). So the dock adds a
slide's overlay layers as soon as it binds the slide (``prepare_overlay``): an empty
(transparent) heatmap and a top-patch layer whose one invisible label holds every character a
rank label can show. The first result then only swaps data into them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_medvl._event_turns import GLYPH_RANKS, GLYPHS_SCORE
from napari_medvl._heatmap_layers import heatmap_result_layers
from napari_medvl._layer_frame import LayerData
from napari_medvl._widget_common import add_layer, one_refresh, set_if_changed

if TYPE_CHECKING:
    import napari

__all__ = [
    "PENDING_KIND",
    "HeatmapHistory",
    "HistoryEntry",
    "find_overlay",
    "overlay_key",
    "pending_boxes_layer",
    "pending_image_layer",
    "prepare_overlay",
    "show_overlay",
]

HISTORY_LENGTH = 30
PENDING_KIND = "heatmap_pending"  # medvl_kind of an overlay layer no result has filled yet


def overlay_key(slide_path: str, mode: str) -> str:
    """Identity of an overlay: one per (slide file, mode)."""
    return f"{slide_path}|{mode}"


def find_overlay(viewer: napari.Viewer, key: str, layer_type: str = "image") -> Any:
    """The viewer's heatmap (``image``) or top-patch (``shapes``) layer of overlay ``key``."""
    for layer in viewer.layers:
        if layer.metadata.get("overlay_key") == key and type(layer).__name__.lower() == layer_type:
            return layer
    return None


def _slide_of(key: str) -> str:
    return key.rsplit("|", 1)[0]


def pending_image_layer(key: str, frame: Any, mode: str, style: dict[str, Any]) -> LayerData:
    """An empty heatmap layer for overlay ``key``: one transparent (NaN) cell of one level-0
    px at the slide's origin, drawn with the colour map a result of ``mode`` would get."""
    from medvl_engine.colormaps import resolve_colormap
    from napari_medvl._layer_frame import WorldFrame, layer_units
    from napari_medvl._overlay_style import napari_colormap

    world = frame if isinstance(frame, WorldFrame) else WorldFrame.from_dict(frame or {})
    colormap = resolve_colormap(style.get("colormap", "auto"), signed=mode == "contrast")
    kwargs = {
        "name": "heatmap (Run to compute)",
        "colormap": napari_colormap(colormap),
        "opacity": style.get("opacity", 0.5),
        "blending": style.get("blending", "translucent"),
        "contrast_limits": (0.0, 1.0),
        "interpolation2d": "nearest",
        "units": layer_units(world),
        **world.image_transform(),
        "metadata": {"medvl_kind": PENDING_KIND, "overlay_key": key, "mode": mode},
    }
    return np.full((1, 1), np.nan, dtype=np.float32), kwargs, "image"


def pending_boxes_layer(key: str, frame: Any) -> LayerData:
    """An invisible top-patch layer for overlay ``key``: one box of one level-0 px whose label
    (rank ``GLYPH_RANKS[0]``; ``_event_turns.show_glyphs`` sets the next ones) makes napari
    render the glyphs of rank labels now rather than when the first result's labels appear.
    The label starts hidden: the layer's first draw compiles the shapes' shaders, a later one
    the text's (0.23 s and 0.05 - 0.14 s here; one draw of 0.37 s together)."""
    from napari_medvl._heatmap_layers import RANK_LABEL_COLOR, TOP_PATCH_TEXT, rank_label_text
    from napari_medvl._layer_frame import WorldFrame, boxes_layer

    world = frame if isinstance(frame, WorldFrame) else WorldFrame.from_dict(frame or {})
    data, kwargs, layer_type = boxes_layer(
        np.array([[0.0, 0.0, 1.0, 1.0]]),
        [GLYPHS_SCORE],
        world,
        name="top patches (Run to compute)",
        edge_color=RANK_LABEL_COLOR,
        text_format=TOP_PATCH_TEXT,
        ranks=[GLYPH_RANKS[0]],
        extra_features={"label_color": ["white"]},
    )
    kwargs["text"] = {**rank_label_text(kwargs["text"]["string"]), "visible": False}
    kwargs["opacity"] = 0.0
    kwargs["metadata"].update({"medvl_kind": PENDING_KIND, "overlay_key": key})
    return data, kwargs, layer_type


def prepare_overlay(viewer: napari.Viewer, key: str, layer_type: str, build: Any) -> Any:
    """The ``image`` or ``shapes`` layer of overlay ``key``, added now if there is none.

    A pending (never filled) layer of the same slide for another mode is taken over instead
    of adding one; otherwise ``build()`` gives the pending layer's data (see
    ``pending_image_layer``). Returns the layer.
    """
    existing = find_overlay(viewer, key, layer_type)
    if existing is not None:
        return existing
    layer: Any  # an image or shapes layer
    for layer in viewer.layers:
        metadata = layer.metadata
        if (
            metadata.get("medvl_kind") == PENDING_KIND
            and type(layer).__name__.lower() == layer_type
            and _slide_of(metadata.get("overlay_key", "")) == _slide_of(key)
        ):
            _, kwargs, _ = build()
            layer.metadata = kwargs["metadata"]
            if layer_type == "image" and layer.colormap.name != kwargs["colormap"].name:
                layer.colormap = kwargs["colormap"]
            return layer
    return add_layer(viewer, build())


def _update_image(layer: Any, layer_data: LayerData) -> None:
    data, kwargs, _ = layer_data
    layer.metadata = kwargs["metadata"]
    low, high = kwargs["contrast_limits"]
    with one_refresh(layer):
        set_if_changed(layer, "scale", kwargs["scale"])
        set_if_changed(layer, "translate", kwargs["translate"])
        layer.data = data
        layer.contrast_limits_range = (min(low, high), max(low, high))
        set_if_changed(layer, "contrast_limits", (low, high))
        if layer.colormap.name != kwargs["colormap"].name:
            layer.colormap = kwargs["colormap"]
        set_if_changed(layer, "opacity", kwargs["opacity"])
        if layer.blending != kwargs["blending"]:
            layer.blending = kwargs["blending"]
    if layer.name != kwargs["name"]:
        layer.name = kwargs["name"]


def _update_boxes(layer: Any, layer_data: LayerData) -> None:
    """Replace a top-patch layer's rectangles, scores and name in place, refreshed once
    (removing a layer costs napari a full garbage collection on the GUI thread)."""
    from napari.utils.colormaps.standardize_color import transform_color

    data, kwargs, _ = layer_data
    layer.metadata = kwargs["metadata"]
    with one_refresh(layer):
        layer.selected_data = set()
        layer.data = [np.asarray(corners) for corners in data]
        layer.features = kwargs["features"]  # refreshes the labels
        if not layer.text.visible:  # a pending layer whose label was still hidden
            layer.text.visible = True
        edge = transform_color(kwargs["edge_color"])[0]
        if len(layer.edge_color) and not np.allclose(layer.edge_color, edge):
            layer.edge_color = kwargs["edge_color"]
        if "opacity" in kwargs:
            set_if_changed(layer, "opacity", kwargs["opacity"])
    if layer.name != kwargs["name"]:
        layer.name = kwargs["name"]


def show_overlay(
    viewer: napari.Viewer,
    outcome: Any,
    frame: Any,
    key: str,
    with_boxes: bool = True,
    with_image: bool = True,
    recolor_labels: bool | None = None,
    **style: Any,
) -> Any:
    """Show a heatmap job's outcome as overlay ``key``: update its layers or add them once.

    ``style``: blending, colormap, opacity, threshold (see ``heatmap_layers``). With
    ``with_image`` the heatmap image layer is updated (or added); with ``with_boxes`` the
    overlay's top-patch layer is replaced by the outcome's (removed when the outcome has
    none). ``recolor_labels`` (default: when the boxes are kept) gives the kept rank labels
    the colours that read best on the new map. Returns the heatmap image layer (None when
    it is neither updated nor there).
    """
    layers = heatmap_result_layers(outcome, frame, overlay_key=key, **style)
    image = find_overlay(viewer, key, "image")
    if with_image and image is None:
        image = add_layer(viewer, layers[0])
    elif with_image:
        _update_image(image, layers[0])
    if recolor_labels is None:
        recolor_labels = not with_boxes
    if recolor_labels and len(layers) > 1:
        boxes = find_overlay(viewer, key, "shapes")
        colors = layers[1][1]["features"]["label_color"]
        if boxes is not None and len(boxes.data) == len(colors):
            if list(boxes.features.get("label_color", [])) != list(colors):
                boxes.features = {**boxes.features, "label_color": list(colors)}
    if with_boxes:
        boxes = find_overlay(viewer, key, "shapes")
        if len(layers) > 1 and boxes is None:
            add_layer(viewer, layers[1])
            if image is not None:
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
