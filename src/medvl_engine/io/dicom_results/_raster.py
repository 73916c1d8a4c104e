"""Parametric maps (PM) and segmentations (SEG) as image grids on the source image."""

from __future__ import annotations

from typing import Any

import numpy as np

from medvl_engine.io._dicom_values import finite_number, printable
from medvl_engine.io.dicom_results._placement import Placement
from medvl_engine.io.dicom_results.result import ResultImage

__all__ = ["read_pm", "read_seg"]


def _referenced_uid(dataset: Any, placement: Placement) -> str:
    if placement.source is not None and placement.units == "px":
        return placement.level0_uid
    for series in dataset.get("ReferencedSeriesSequence") or []:
        for item in series.get("ReferencedInstanceSequence") or []:
            return str(item.get("ReferencedSOPInstanceUID", ""))
    return ""


def _first_frame_note(image: Any, placement: Placement) -> None:
    frames = int(image.get("NumberOfFrames", 1) or 1)
    if frames > 1:
        placement.notes.append(f"it holds {frames} frames that are not tiles; the first is shown")


def read_pm(dataset: Any, placement: Placement) -> tuple[list[ResultImage], list[str]]:
    """The map's real-world values float32 [rows, cols] (the first mapping), placed."""
    import highdicom as hd

    image = hd.Image.from_dataset(dataset, copy=False)
    if image.is_tiled:
        values = image.get_total_pixel_matrix(dtype=np.float32, apply_real_world_transform=True)
    else:
        _first_frame_note(image, placement)
        values = _first_frame_values(dataset)
    values = np.asarray(values, np.float32)
    values = values.reshape(values.shape[-2], values.shape[-1])
    label, unit, value_range = _mapping(dataset, values)
    origin, pixel_size = placement.grid(dataset, values.shape)
    uid = _referenced_uid(dataset, placement)
    name = printable(dataset.get("ContentDescription")) or label or "parametric map"
    maker = " ".join(
        v
        for v in (
            printable(dataset.get("ManufacturerModelName")),
            printable(dataset.get("SoftwareVersions")),
        )
        if v
    )
    return [
        ResultImage(
            name=label or name,
            values=values,
            origin=origin,
            pixel_size=pixel_size,
            kind="map",
            value_range=value_range,
            unit=unit,
            source_uid=uid,
        )
    ], [maker] if maker else []


def _first_frame_values(dataset: Any) -> np.ndarray:
    """Real-world values float32 [rows, cols] of frame 1 of an untiled map: float pixel data
    as stored, integer pixel data through the first mapping's slope and intercept."""
    rows, cols = int(dataset.Rows), int(dataset.Columns)
    for keyword, dtype in (("FloatPixelData", "<f4"), ("DoubleFloatPixelData", "<f8")):
        if keyword in dataset:
            stored = np.frombuffer(dataset[keyword].value, dtype=dtype, count=rows * cols)
            return stored.reshape(rows, cols).astype(np.float32)
    stored = np.asarray(dataset.pixel_array, np.float64).reshape(-1, rows, cols)[0]
    try:
        mapping = dataset.SharedFunctionalGroupsSequence[0].RealWorldValueMappingSequence[0]
        slope = finite_number(mapping.get("RealWorldValueSlope"))
        intercept = finite_number(mapping.get("RealWorldValueIntercept"))
    except (AttributeError, IndexError, KeyError):
        slope = intercept = None
    real: np.ndarray = stored * (1.0 if slope is None else slope) + (intercept or 0.0)
    return real.astype(np.float32)


def _mapping(dataset: Any, values: np.ndarray) -> tuple[str, str, tuple[float, float]]:
    """(LUT label, unit meaning, mapped value range) of the first Real World Value Mapping."""
    finite = values[np.isfinite(values)]
    fallback = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    try:
        shared = dataset.SharedFunctionalGroupsSequence[0]
        mapping = shared.RealWorldValueMappingSequence[0]
    except (AttributeError, IndexError, KeyError):
        return "", "", fallback
    label = printable(mapping.get("LUTLabel"))
    units = mapping.get("MeasurementUnitsCodeSequence") or []
    unit = printable(units[0].get("CodeMeaning")) if units else ""
    low = finite_number(mapping.get("DoubleFloatRealWorldValueFirstValueMapped"))
    high = finite_number(mapping.get("DoubleFloatRealWorldValueLastValueMapped"))
    if low is None or high is None or not high > low:
        low, high = fallback
    return label, unit, (low, high)


def read_seg(dataset: Any, placement: Placement) -> tuple[list[ResultImage], list[str]]:
    """Every segment as a mask: float32 in [0, 1] (FRACTIONAL) or uint8 0/1 (BINARY)."""
    import highdicom as hd

    seg = hd.seg.Segmentation.from_dataset(dataset, copy=False)
    fractional = str(dataset.get("SegmentationType", "")).upper() == "FRACTIONAL"
    dtype = np.float32 if fractional else np.uint8
    images = []
    algorithms = []
    uid = _referenced_uid(dataset, placement)
    for segment in dataset.get("SegmentSequence") or []:
        number = int(segment.SegmentNumber)
        if seg.is_tiled:
            mask = seg.get_total_pixel_matrix(segment_numbers=[number], dtype=dtype)
        else:
            sources = [uid_ for _, _, uid_ in seg.get_source_image_uids()]
            mask = seg.get_pixels_by_source_instance(
                source_sop_instance_uids=sources[:1], segment_numbers=[number], dtype=dtype
            )[0]
        mask = np.asarray(mask)
        mask = mask.reshape(mask.shape[0], mask.shape[1])
        origin, pixel_size = placement.grid(dataset, (mask.shape[0], mask.shape[1]))
        algorithm = printable(segment.get("SegmentAlgorithmName"))
        if algorithm:
            algorithms.append(algorithm)
        images.append(
            ResultImage(
                name=printable(segment.get("SegmentLabel")) or f"segment {number}",
                values=mask,
                origin=origin,
                pixel_size=pixel_size,
                kind="mask",
                value_range=(0.0, 1.0),
                unit="probability" if fractional else "",
                source_uid=uid,
                color=_display_color(segment),
            )
        )
    return images, list(dict.fromkeys(algorithms))


def _display_color(segment: Any) -> tuple[int, int, int] | None:
    """The segment's Recommended Display CIELab Value as sRGB 0..255 (None when absent or
    not three values)."""
    value = segment.get("RecommendedDisplayCIELabValue")
    if value is None or len(value) != 3:
        return None
    from highdicom.color import CIELabColor

    try:
        rgb = CIELabColor.from_dicom_value(tuple(int(v) for v in value)).to_rgb()
    except (TypeError, ValueError):
        return None
    return (int(rgb[0]), int(rgb[1]), int(rgb[2]))
