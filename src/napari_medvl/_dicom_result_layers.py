"""Layers of a DICOM result object (SR, GSPS, parametric map, segmentation, annotations).

The engine reads the object as plain data in its source image's level-0 px
(``medvl_engine.io.dicom_results``); here each part becomes a layer drawn through the world
frame of that image when it is open in the viewer (its slide or mammogram layer), else
through a plain frame in source px (micrometres when the engine could not place it):
maps as colour-mapped images with the heatmap colour bar, masks as labels (binary) or
images (fractional), shapes as Shapes layers with their labels (rank and score for top
patches), points and text as Points layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_medvl._layer_frame import LayerData, WorldFrame, grid_image_layer, layer_units

__all__ = ["DICOM_RESULT_KIND", "dicom_result_layers", "result_layers"]

DICOM_RESULT_KIND = "dicom_result"
_IMAGE_KINDS = ("slide", "mammogram")
_SHAPE_COLOR = "yellow"


def _layer_source(layer: Any) -> Any:
    """The DICOM image a slide or mammogram layer shows (None for other files): the one its
    reader left in ``metadata["dicom_image_source"]`` (a slide on a PACS), else read from its
    file's header."""
    from medvl_engine.errors import MedVLError
    from medvl_engine.io.dicom_results import dicom_image_source

    if layer.metadata.get("dicom_image_source") is not None:
        return layer.metadata["dicom_image_source"]
    path = layer.metadata.get("path")
    if not path:
        return None
    candidate = Path(path)
    if not candidate.is_dir() and candidate.suffix.lower() not in (".dcm", ".dicom"):
        return None
    try:
        return dicom_image_source(candidate)
    except MedVLError:
        return None


@dataclasses.dataclass(frozen=True)
class _PendingLayer:
    """A layer the same reader call returns, not in the viewer yet: its name and metadata."""

    name: str
    metadata: dict[str, Any]


def _open_sources(viewer: Any, pending: Sequence[LayerData] = ()) -> list[tuple[Any, Any]]:
    """(layer, DicomImageSource) of every DICOM slide or mammogram in ``pending`` (layer data
    of the same reader call) or open in ``viewer``, ``pending`` first."""
    layers = [_PendingLayer(kwargs["name"], kwargs["metadata"]) for _, kwargs, *_ in pending]
    found = []
    for layer in [*layers, *(viewer.layers if viewer is not None else [])]:
        if layer.metadata.get("medvl_kind") in _IMAGE_KINDS:
            source = _layer_source(layer)
            if source is not None:
                found.append((layer, source))
    return found


def _slide_of(result: Any, sources: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """The open slide a whole-slide result belongs to: it references one of its instances
    or shares its Frame of Reference; (None, None) when there is none."""
    for layer, source in sources:
        if not source.is_slide:
            continue
        if set(result.source_uids) & set(source.sop_instance_uids) or (
            result.frame_of_reference_uid
            and source.frame_of_reference_uid == result.frame_of_reference_uid
        ):
            return layer, source
    return None, None


def dicom_result_layers(
    result: Any,
    viewer: Any,
    reread: Callable[..., Any],
    pending: Sequence[LayerData] = (),
    name: str | None = None,
) -> list[LayerData]:
    """Layers for a ``DicomResult``. A whole-slide result whose slide is open in ``viewer``
    (or among ``pending``, the image layers the same reader call returns) is read again on
    that slide (``reread(path, source=...)``) and drawn in its world frame; other parts
    (shapes on a mammogram, a map of one) are drawn in the frame of the open image they
    reference; the rest in a plain frame in source px (or micrometres). Layer names start
    with ``name`` (default: the file's stem)."""
    sources = _open_sources(viewer, pending)
    slide_layer, slide_source = _slide_of(result, sources)
    if slide_layer is not None:
        if slide_source.sop_instance_uids[:1] != [result.placed_on]:
            result = reread(result.path, source=slide_source)
        return result_layers(result, lambda uid: slide_layer, name=name)
    by_uid = {uid: layer for layer, source in sources for uid in source.sop_instance_uids}
    return result_layers(result, by_uid.get, plain=WorldFrame(units=result.units), name=name)


def result_layers(
    result: Any,
    layer_of: Callable[[str], Any],
    plain: WorldFrame | None = None,
    name: str | None = None,
) -> list[LayerData]:
    """Layers for each part of ``result``, drawn through the world frame of ``layer_of(its
    source uid)`` (an image layer) or ``plain`` when that gives None; their names start with
    ``name`` (default: the file's stem)."""
    plain = plain or WorldFrame(units=result.units)
    layers: list[LayerData] = []
    base = {
        "medvl_result": result.kind,
        "dicom_path": str(result.path),
        "sop_instance_uid": result.sop_instance_uid,
        "source_uids": list(result.source_uids),
        "placed_on": result.placed_on,
    }
    name = name or Path(str(result.path)).stem

    def frame_of(uid: str) -> tuple[WorldFrame, Any]:
        layer = layer_of(uid) if uid else None
        if layer is None:
            return plain, None
        return WorldFrame.from_dict(layer.metadata["world_frame"]), layer

    for image in result.images:
        frame, layer = frame_of(image.source_uid)
        layers.append(_image_layer(image, frame, f"{name}: {image.name}", base, result, layer))
    for shapes in result.shapes:
        if len(shapes) == 0:
            continue
        frame, layer = frame_of(shapes.source_uid)
        title = f"{name}: {shapes.name}"
        if layer is not None:
            title = f"{title} ({layer.name})"
        if shapes.shape_type == "point":
            layers.append(_points_layer(shapes, frame, title, base))
        else:
            layers.append(_shapes_layer(shapes, frame, title, base))
    return layers


def _image_layer(
    image: Any, frame: WorldFrame, title: str, base: dict[str, Any], result: Any, source_layer: Any
) -> LayerData:
    if image.kind == "mask" and image.values.dtype == np.uint8:
        data, kwargs, _ = grid_image_layer(
            image.values, frame, image.pixel_size, image.origin, name=title, contrast_limits=(0, 1)
        )
        kwargs = {key: kwargs[key] for key in ("name", "scale", "translate", "units", "metadata")}
        kwargs["opacity"] = 0.5
        kwargs["metadata"].update({**base, "medvl_kind": DICOM_RESULT_KIND})
        color = getattr(image, "color", None)
        if color is not None:
            rgba = (*(channel / 255.0 for channel in color), 1.0)
            kwargs["colormap"] = {0: "transparent", 1: rgba, None: "transparent"}
        return np.asarray(image.values, np.uint8), kwargs, "labels"
    from medvl_engine.colormaps import display_limits, is_signed, resolve_colormap
    from napari_medvl._overlay_style import napari_colormap

    mode = "probability" if image.kind == "mask" else image.name
    signed = image.kind == "map" and is_signed(None, image.value_range)
    limits = display_limits(image.value_range, signed)
    if not limits[1] > limits[0]:
        limits = (limits[0], limits[0] + 1e-6)
    colormap = resolve_colormap(None, signed)
    data, kwargs, kind = grid_image_layer(
        image.values,
        frame,
        image.pixel_size,
        image.origin,
        name=title,
        colormap="gray",
        contrast_limits=limits,
    )
    kwargs["colormap"] = napari_colormap(colormap)
    from medvl_engine.demo_models import DEMO_NOTICE

    notice = DEMO_NOTICE if DEMO_NOTICE in result.description else ""
    kwargs["metadata"].update(
        {
            **base,
            "medvl_kind": "heatmap",
            "prompt": image.name,
            "mode": mode,
            "normalize": "none",
            "heatmap": None,
            "feature_store": None,
            "top_patches": None,
            "slide": source_layer.metadata.get("slide") if source_layer is not None else None,
            "colormap": colormap,
            "signed": signed,
            "value_range": tuple(float(v) for v in image.value_range),
            "threshold": None,
            "model": ", ".join(result.algorithm) or None,
            "demo_notice": notice or None,
        }
    )
    return data, kwargs, kind


def _shapes_layer(shapes: Any, frame: WorldFrame, title: str, base: dict[str, Any]) -> LayerData:
    data = [frame.to_world(points) for points in shapes.shapes]
    features: dict[str, Any] = {"label": list(shapes.labels)}
    for key, values in shapes.values.items():
        features[key] = np.asarray(values, np.float64)
    kwargs = {
        "name": title,
        "shape_type": shapes.shape_type,
        "edge_color": _SHAPE_COLOR,
        "face_color": "transparent",
        "edge_width": max(frame.scale_x, frame.scale_y) * 3.0,
        "units": layer_units(frame),
        "features": features,
        "text": {"string": "{label}", "color": _SHAPE_COLOR, "anchor": "upper_left", "size": 9},
        "metadata": {**base, "medvl_kind": DICOM_RESULT_KIND, "world_frame": frame.as_dict()},
    }
    return data, kwargs, "shapes"


def _points_layer(shapes: Any, frame: WorldFrame, title: str, base: dict[str, Any]) -> LayerData:
    data = np.concatenate([frame.to_world(points) for points in shapes.shapes], axis=0)
    kwargs = {
        "name": title,
        "size": max(frame.scale_x, frame.scale_y) * 8.0,
        "face_color": _SHAPE_COLOR,
        "units": layer_units(frame),
        "features": {"label": list(shapes.labels)},
        "text": {"string": "{label}", "color": _SHAPE_COLOR, "anchor": "upper_left", "size": 9},
        "metadata": {**base, "medvl_kind": DICOM_RESULT_KIND, "world_frame": frame.as_dict()},
    }
    return data, kwargs, "points"
