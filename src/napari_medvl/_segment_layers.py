"""The layers of a tissue map, and the recount that follows an edit of its labels.

Two layers per slide show a :class:`~medvl_engine.segmentation.SegmentResult`:

``tissue map: <slide>``: labels [rows, cols], one cell per grid cell (0 no tissue, k + 1
class k, K + 1 "uncertain"; uint8 while K + 1 < 256, :func:`display_labels`), scale = the
cell's (y, x) size in um (level-0 px without an mpp), translate = the first cell's centre,
in the slide layer's world frame.

``regions: <slide>``: one closed path per ring of each region (the outline, then each hole),
its vertices (y, x) in the same world frame (ring (x, y) level-0 px times the mpp, the first
vertex repeated at the end), its edge the class's colour, the class name written on the
outline; features ``class``, ``label``, ``ring`` ("outline" or "hole") and ``area`` (the
region's, um^2 or px^2, on its outline). Paths, not napari polygons: a polygon's face is
triangulated in Python by napari without a compiled triangulator (about 45 ms per region of
60 vertices here, 12 times a path's edges) only to be drawn transparent; the fill is the
labels layer's.

Colours (:func:`class_rgba`) are the GeoJSON and DICOM exports' (``class_colors``), so a
class has one colour on the map, its outlines, the dock's legend and in QuPath.

The labels layer is the one a pathologist edits (:func:`recount`): painting a cell another
class is a statement about tissue at the map's resolution, and the area table counts those
cells. The outlines are drawn from the labels again after each edit (napari's polygons carry
no holes and may overlap, so an edited polygon says nothing definite about the cells under
it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_medvl._layer_frame import LayerData, layer_units
from napari_medvl._slide_layers import slide_frame
from napari_medvl._widget_common import one_refresh, set_if_changed

if TYPE_CHECKING:
    from medvl_engine.segmentation import SegmentResult

__all__ = [
    "class_rgba",
    "display_labels",
    "label_colormap",
    "map_layer_name",
    "recount",
    "regions_layer",
    "regions_layer_name",
    "update_regions_layer",
]

_EDGE_LEVEL0_PX = 6.0
"""Outline width in level-0 px (3 um at 0.5 um/px)."""


def map_layer_name(slide: Any) -> str:
    """``tissue map: <slide file>``."""
    return f"tissue map: {Path(str(slide.path)).name}" if slide is not None else "tissue map"


def regions_layer_name(slide: Any) -> str:
    """``regions: <slide file>``."""
    return f"regions: {Path(str(slide.path)).name}" if slide is not None else "regions"


def class_rgba(count: int) -> list[tuple[float, float, float, float]]:
    """RGBA 0..1 of label values 1..count + 1: ``count`` classes, then "uncertain"."""
    from medvl_engine.export.regions import class_colors

    return [(r / 255, g / 255, b / 255, 1.0) for r, g, b in class_colors(count)]


def display_labels(labels: np.ndarray) -> np.ndarray:
    """The map's labels as the layer holds them: uint8 when every label fits (napari builds a
    labels layer's colour texture over every value of its dtype: 256 for uint8, 65,536 for
    int16, about 0.3 s in Python on each new class count), else as they are."""
    values = np.asarray(labels)
    if values.size == 0 or (values.min() >= 0 and values.max() < 256):
        return values.astype(np.uint8)
    return values


def label_colormap(count: int) -> Any:
    """A napari DirectLabelColormap: 0 transparent, labels 1..count the classes' colours of the
    exports, count + 1 ("uncertain") grey."""
    from napari.utils.colormaps import DirectLabelColormap

    colours: dict[int | None, tuple[float, float, float, float]] = {
        None: (0.0, 0.0, 0.0, 0.0),
        0: (0.0, 0.0, 0.0, 0.0),
    }
    for label, rgba in enumerate(class_rgba(count), start=1):
        colours[label] = rgba
    return DirectLabelColormap(color_dict=colours)


def regions_layer(result: SegmentResult, name: str) -> LayerData:
    """The shapes layer of ``result``'s regions (module docstring), ``(data, kwargs, "shapes")``."""
    mapped = result.class_map
    frame = slide_frame(mapped.mpp)
    colours = class_rgba(len(mapped.names))
    polygons: list[np.ndarray] = []
    edge: list[tuple[float, float, float, float]] = []
    features: dict[str, list[Any]] = {"class": [], "label": [], "ring": [], "area": [], "text": []}
    for region in result.regions:
        area = region.area_um2 if region.area_um2 is not None else region.area_px2
        for index, ring in enumerate(region.rings):
            polygons.append(frame.to_world(ring))  # closed: the first vertex repeated
            edge.append(colours[region.label - 1])
            features["class"].append(region.name)
            features["label"].append(region.label)
            features["ring"].append("outline" if index == 0 else "hole")
            features["area"].append(float(area) if index == 0 else 0.0)
            features["text"].append(region.name if index == 0 else "")
    kwargs: dict[str, Any] = {
        "name": name,
        "shape_type": "path",
        "edge_color": np.asarray(edge, dtype=np.float32).reshape(-1, 4) if edge else "white",
        "face_color": "transparent",
        "edge_width": _EDGE_LEVEL0_PX * max(frame.scale_x, frame.scale_y),
        "units": layer_units(frame),
        "features": features,
        "text": {"string": "{text}", "color": "white", "anchor": "center", "size": 10},
        "metadata": {"medvl_kind": "segmentation regions", "world_frame": frame.as_dict()},
    }
    return polygons, kwargs, "shapes"


def update_regions_layer(layer: Any, layer_data: LayerData) -> None:
    """Give an existing regions layer the rings, colours and features of ``layer_data``
    (one refresh; replacing the layer would cost napari a garbage collection on the GUI
    thread)."""
    data, kwargs, _ = layer_data
    with one_refresh(layer):
        layer.data = [(ring, "path") for ring in data]
        layer.features = kwargs["features"]
        if len(data):
            layer.edge_color = kwargs["edge_color"]
        set_if_changed(layer, "edge_width", kwargs["edge_width"])
    layer.metadata.update(kwargs["metadata"])


def recount(result: SegmentResult, labels: np.ndarray) -> SegmentResult:
    """``result`` with its map's labels replaced by ``labels`` int [rows, cols] (an edited
    copy of the labels layer): the regions traced again and the area table counted again, as
    the engine does for a new map (:func:`~medvl_engine.segmentation.class_regions` with the
    defaults ``segment`` uses, :func:`~medvl_engine.segmentation.area_table`: each cell's
    level-0 px^2 inside the slide, times mpp_x * mpp_y, i.e. the layer's scale_y * scale_x
    um^2 for a whole cell; share = a class's area / the area of all labelled cells).

    Values that are no label of the map (below 0, above "uncertain") count as no tissue, and
    a note says how many cells had one. The class probabilities stay the model's.
    """
    from medvl_engine.segmentation import area_table, class_regions

    mapped = result.class_map
    values = np.asarray(labels)
    if values.shape != mapped.labels.shape:
        from medvl_engine.errors import DataError

        raise DataError(
            f"The edited map has shape {values.shape}, the segmentation {mapped.labels.shape}."
        )
    edited = values.astype(mapped.labels.dtype, copy=True)
    foreign = (values < 0) | (values > mapped.uncertain_label)
    notes = []
    if foreign.any():
        edited[foreign] = 0
        notes.append(
            f"{int(foreign.sum())} cells carry a label that is no class "
            f"(1..{mapped.uncertain_label}); they count as no tissue."
        )
    new_map = dataclasses.replace(mapped, labels=edited)
    regions = class_regions(new_map)
    table = area_table(new_map, regions)
    return dataclasses.replace(result, class_map=new_map, regions=regions, table=table, notes=notes)
