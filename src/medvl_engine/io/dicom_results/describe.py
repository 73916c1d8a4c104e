"""What a DICOM result object holds, in a few lines (``medvl info RESULT.dcm``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from medvl_engine.io.dicom_results.read import read_dicom_result
from medvl_engine.io.dicom_results.result import (
    RESULT_KINDS,
    DicomResult,
    ResultImage,
    ResultShapes,
)

__all__ = ["describe_dicom_result", "describe_result"]


def describe_dicom_result(path: str | Path) -> list[str]:
    """Lines saying what the result object at ``path`` holds: its kind, description,
    algorithm, source image, and per layer its size and values. No patient data."""
    return describe_result(read_dicom_result(path))


def describe_result(result: DicomResult) -> list[str]:
    """The lines of :func:`describe_dicom_result` for a result already read."""
    lines = [f"{result.path.name}: DICOM {RESULT_KINDS[result.kind]} ({result.kind})"]
    if result.description:
        lines.append(f"  description: {result.description}")
    if result.algorithm:
        lines.append(f"  algorithm: {', '.join(result.algorithm)}")
    sources = ", ".join(result.source_uids[:3]) + (" ..." if len(result.source_uids) > 3 else "")
    lines.append(f"  source image: {sources or 'not stated'}")
    if result.frame_of_reference_uid:
        lines.append(f"  frame of reference: {result.frame_of_reference_uid}")
    where = (
        "level-0 px of the source"
        if result.placed_on
        else (
            "micrometres (source not found)"
            if result.units == "um"
            else "px of the referenced image"
        )
    )
    lines.append(f"  coordinates: {where}")
    lines.extend(_image_line(image, result.units) for image in result.images)
    lines.extend(_shapes_line(shapes) for shapes in result.shapes)
    if not result.images and not result.shapes:
        lines.append("  holds no shapes or maps medvl can show")
    lines.extend(f"  note: {note}" for note in result.notes)
    return lines


def _image_line(image: ResultImage, units: str) -> str:
    rows, cols = image.values.shape
    values = np.asarray(image.values, np.float64)
    finite = values[np.isfinite(values)]
    unit = units if units == "um" else "px"
    where = (
        f"{cols} x {rows} pixels of {image.pixel_size[0]:.4g} x {image.pixel_size[1]:.4g} {unit} "
        f"from ({image.origin[0]:.4g}, {image.origin[1]:.4g})"
    )
    if image.kind == "mask":
        covered = float((finite > 0).mean()) if finite.size else 0.0
        return f"  segment '{image.name}': {where}, {covered:.1%} of pixels set"
    empty = values.size - finite.size
    span = f"{finite.min():.4g} .. {finite.max():.4g}" if finite.size else "no values"
    unit_text = f" ({image.unit})" if image.unit else ""
    blank = f", {empty} without a value" if empty else ""
    return f"  map '{image.name}': {where}, values {span}{unit_text}{blank}"


def _shapes_line(shapes: ResultShapes) -> str:
    kind = {"path": "polyline", "point": "point"}.get(shapes.shape_type, shapes.shape_type)
    count = f"{len(shapes)} {kind}{'s' if len(shapes) != 1 else ''}"
    measured = []
    for name, values in list(shapes.values.items())[:3]:
        finite = values[np.isfinite(values)]
        if finite.size:
            measured.append(f"{name} {finite.min():.3g} .. {finite.max():.3g}")
    details = f"; {', '.join(measured)}" if measured else ""
    return f"  '{shapes.name}': {count}{details}"
