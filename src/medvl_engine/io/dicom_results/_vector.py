"""Bulk annotations (ANN), TID 1500 structured reports (SR) and presentation states (GSPS)
as shapes on the source image."""

from __future__ import annotations

from typing import Any

import numpy as np

from medvl_engine.io._dicom_values import as_list, finite_number, printable
from medvl_engine.io.dicom_results._placement import Placement
from medvl_engine.io.dicom_results._shapes import (
    ShapeSink,
    classify_outline,
    ellipse_corners,
    shape_label,
)
from medvl_engine.io.dicom_results.result import ResultShapes

__all__ = ["read_ann", "read_gsps", "read_sr", "sink_shapes"]

_TRACKING_IDENTIFIER = "112039"
_FINDING = "121071"
_ALGORITHM_NAME = "111001"
_ALGORITHM_VERSION = "111003"


def sink_shapes(sink: ShapeSink) -> list[ResultShapes]:
    """One ResultShapes per (group, shape type, image), measurements aligned by shape."""
    out = []
    for (group, shape_type, source_uid), items in sink.groups.items():
        names = list(dict.fromkeys(name for _, _, values in items for name in values))
        out.append(
            ResultShapes(
                name=group,
                shape_type=shape_type,
                shapes=[points for points, _, _ in items],
                labels=[label for _, label, _ in items],
                values={
                    name: np.array([values.get(name, np.nan) for _, _, values in items], np.float64)
                    for name in names
                },
                source_uid=source_uid,
            )
        )
    return out


def _items(sequence: Any) -> list[Any]:
    """The items of a sequence attribute ([] when absent or empty)."""
    return list(sequence) if sequence else []


def _meaning(sequence: Any) -> str:
    items = _items(sequence)
    return printable(items[0].get("CodeMeaning")) if items else ""


def _code_value(sequence: Any) -> str:
    items = _items(sequence)
    return str(items[0].get("CodeValue", "")) if items else ""


# ------------------------------------------------------------------------------ ANN


def read_ann(dataset: Any, placement: Placement) -> tuple[list[ResultShapes], list[str]]:
    """Every annotation group: its shapes, labels and measurements; and its algorithms."""
    import highdicom as hd

    ann = hd.ann.MicroscopyBulkSimpleAnnotations.from_dataset(dataset, copy=False)
    three_d = str(dataset.get("AnnotationCoordinateType", "2D")).upper() == "3D"
    referenced = [
        str(item.ReferencedSOPInstanceUID) for item in dataset.get("ReferencedImageSequence") or []
    ]
    referenced_uid = referenced[0] if referenced else ""
    if str(dataset.get("PixelOriginInterpretation", "VOLUME")).upper() == "FRAME" and not three_d:
        placement.notes.append(
            "its coordinates are relative to one frame; shown from the image corner"
        )
    sink = ShapeSink()
    algorithms = []
    for group in ann.get_annotation_groups():
        label = printable(group.label) or f"group {group.number}"
        for item in group.get("AnnotationGroupAlgorithmIdentificationSequence") or []:
            algorithms.append(
                " ".join(
                    v
                    for v in (
                        printable(item.get("AlgorithmName")),
                        printable(item.get("AlgorithmVersion")),
                    )
                    if v
                )
            )
        graphic_type = str(group.graphic_type.value)
        coordinates = group.get_graphic_data(coordinate_type="3D" if three_d else "2D")
        names, values, units = group.get_measurements()
        columns = [_measurement_name(name, unit) for name, unit in zip(names, units, strict=True)]
        for index, points in enumerate(coordinates):
            points = np.asarray(points, np.float64)
            if three_d:
                xy = placement.slide_points(points)
                uid = placement.level0_uid if placement.units == "px" else ""
            else:
                xy = placement.image_points(points, referenced_uid)
                uid = (
                    placement.level0_uid
                    if placement.source and referenced_uid in placement.source.level_sizes
                    else referenced_uid
                )
            measured = {name: float(values[index, column]) for column, name in enumerate(columns)}
            shape_type, xy = _ann_shape(graphic_type, xy)
            sink.add(label, shape_type, xy, shape_label("", measured) or label, measured, uid)
    return sink_shapes(sink), algorithms


def _measurement_name(name: Any, unit: Any) -> str:
    meaning = printable(getattr(name, "meaning", "")) or str(getattr(name, "value", "value"))
    return _with_unit(meaning, str(getattr(unit, "value", "")))


def _with_unit(name: str, unit: str) -> str:
    """``name [unit]``; a dimensionless unit ("1", or a UCUM annotation such as "{rank}")
    is left out."""
    return f"{name} [{unit}]" if unit and unit != "1" and not unit.startswith("{") else name


def _ann_shape(graphic_type: str, points: np.ndarray) -> tuple[str, np.ndarray]:
    if graphic_type == "POINT":
        return "point", points[:1]
    if graphic_type == "ELLIPSE":
        return "ellipse", ellipse_corners(points)
    if graphic_type == "POLYLINE":
        return classify_outline(points, closed=False)
    return classify_outline(points, closed=True)  # POLYGON, RECTANGLE


# ------------------------------------------------------------------------------- SR


def read_sr(dataset: Any, placement: Placement) -> tuple[list[ResultShapes], list[str]]:
    """Planar ROIs of a (TID 1500) report: every SCOORD/SCOORD3D with the measurements,
    tracking identifier and finding of the container holding it."""
    sink = ShapeSink()
    algorithms: list[str] = []
    _walk_sr(dataset.get("ContentSequence") or [], placement, sink, algorithms, "")
    return sink_shapes(sink), list(dict.fromkeys(algorithms))


def _walk_sr(
    items: Any, placement: Placement, sink: ShapeSink, algorithms: list[str], title: str
) -> None:
    scoords: list[Any] = []
    measured: dict[str, float] = {}
    label = ""
    finding = ""
    for item in items:
        value_type = str(item.get("ValueType", ""))
        concept = _code_value(item.get("ConceptNameCodeSequence"))
        if value_type in ("SCOORD", "SCOORD3D"):
            scoords.append(item)
        elif value_type == "NUM":
            name = _meaning(item.get("ConceptNameCodeSequence")) or "value"
            for measured_value in item.get("MeasuredValueSequence") or []:
                number = finite_number(measured_value.get("NumericValue"))
                unit = _code_value(measured_value.get("MeasurementUnitsCodeSequence"))
                key = _with_unit(name, unit)
                measured[key] = number if number is not None else float("nan")
            scoords.extend(
                child
                for child in item.get("ContentSequence") or []
                if str(child.get("ValueType", "")) in ("SCOORD", "SCOORD3D")
            )
        elif value_type == "TEXT" and concept == _TRACKING_IDENTIFIER:
            label = printable(item.get("TextValue"))
        elif value_type == "CODE" and concept == _FINDING:
            finding = _meaning(item.get("ConceptCodeSequence"))
        elif value_type == "TEXT" and concept == _ALGORITHM_NAME:
            algorithms.append(printable(item.get("TextValue")))
        elif value_type == "CONTAINER":
            _walk_sr(
                item.get("ContentSequence") or [],
                placement,
                sink,
                algorithms,
                _meaning(item.get("ConceptNameCodeSequence")),
            )
    group = finding or title or "regions"
    for scoord in scoords:
        _add_scoord(scoord, placement, sink, group, label or group, measured)


def _add_scoord(
    item: Any,
    placement: Placement,
    sink: ShapeSink,
    group: str,
    name: str,
    measured: dict[str, float],
) -> None:
    """One SCOORD of a report in ``group``, labelled by ``name`` (its tracking identifier)
    and its measurements."""
    graphic_type = str(item.get("GraphicType", "")).upper()
    data = np.asarray([float(v) for v in as_list(item.get("GraphicData"))], np.float64)
    if str(item.get("ValueType")) == "SCOORD3D":
        points = placement.slide_points(data.reshape(-1, 3))
        uid = placement.level0_uid if placement.units == "px" else ""
    else:
        references = [
            child
            for child in item.get("ContentSequence") or []
            if str(child.get("ValueType")) == "IMAGE"
        ]
        referenced = ""
        if references and references[0].get("ReferencedSOPSequence"):
            referenced = str(
                references[0].ReferencedSOPSequence[0].get("ReferencedSOPInstanceUID", "")
            )
        points = placement.image_points(data.reshape(-1, 2), referenced)
        known = placement.source is not None and referenced in placement.source.level_sizes
        uid = placement.level0_uid if known else referenced
    if graphic_type in ("POINT", "MULTIPOINT"):
        for point in points:
            sink.add(group, "point", point[None], shape_label(name, measured), measured, uid)
        return
    if graphic_type == "CIRCLE":
        shape_type, points = "ellipse", ellipse_corners(points, circle=True)
    elif graphic_type == "ELLIPSE":
        shape_type, points = "ellipse", ellipse_corners(points)
    else:
        shape_type, points = classify_outline(points, closed=graphic_type == "POLYGON")
    sink.add(group, shape_type, points, shape_label(name, measured), measured, uid)


# ----------------------------------------------------------------------------- GSPS


def read_gsps(dataset: Any, placement: Placement) -> tuple[list[ResultShapes], list[str]]:
    """Graphic and text objects of every graphic annotation, by graphic layer."""
    sink = ShapeSink()
    every_image = [
        str(image.get("ReferencedSOPInstanceUID", ""))
        for series in _items(dataset.get("ReferencedSeriesSequence"))
        for image in _items(series.get("ReferencedImageSequence"))
    ]
    for annotation in dataset.get("GraphicAnnotationSequence") or []:
        layer = printable(annotation.get("GraphicLayer")) or "annotations"
        references = _items(annotation.get("ReferencedImageSequence"))
        referenced = str(references[0].get("ReferencedSOPInstanceUID", "")) if references else ""
        referenced = referenced or (every_image[0] if every_image else "")
        known = placement.source is not None and referenced in placement.source.level_sizes
        uid = placement.level0_uid if known else referenced
        size = placement.source.level_sizes.get(referenced) if known and placement.source else None
        for graphic in annotation.get("GraphicObjectSequence") or []:
            points = _gsps_points(
                graphic.get("GraphicData"), graphic.get("GraphicAnnotationUnits"), size, placement
            )
            points = placement.image_points(points, referenced)
            graphic_type = str(graphic.get("GraphicType", "")).upper()
            if graphic_type == "POINT":
                sink.add(layer, "point", points[:1], layer, None, uid)
            elif graphic_type in ("CIRCLE", "ELLIPSE"):
                sink.add(
                    layer,
                    "ellipse",
                    ellipse_corners(points, circle=graphic_type == "CIRCLE"),
                    layer,
                    None,
                    uid,
                )
            else:
                filled = str(graphic.get("GraphicFilled", "N")).upper() == "Y"
                shape_type, points = classify_outline(points, closed=filled)
                sink.add(layer, shape_type, points, layer, None, uid)
        for text in annotation.get("TextObjectSequence") or []:
            corner = text.get("BoundingBoxTopLeftHandCorner") or text.get("AnchorPoint")
            units = (
                text.get("BoundingBoxAnnotationUnits")
                if text.get("BoundingBoxTopLeftHandCorner")
                else text.get("AnchorPointAnnotationUnits")
            )
            if corner is None:
                continue
            point = placement.image_points(_gsps_points(corner, units, size, placement), referenced)
            sink.add(
                f"{layer} text",
                "point",
                point[:1],
                printable(text.get("UnformattedTextValue"), 200),
                None,
                uid,
            )
    creator = printable(dataset.get("ContentCreatorName"))
    return sink_shapes(sink), [creator] if creator else []


def _gsps_points(
    data: Any, units: Any, size: tuple[int, int] | None, placement: Placement
) -> np.ndarray:
    points = np.asarray([float(v) for v in as_list(data)], np.float64).reshape(-1, 2)
    if str(units or "PIXEL").upper() == "DISPLAY":
        if size is None:
            placement.notes.append(
                "display-relative graphics are scaled to a 1 x 1 image (no source)"
            )
            return points
        return points * np.asarray(size, np.float64)
    return points
