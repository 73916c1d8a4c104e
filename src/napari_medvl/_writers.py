"""npe2 writers: File > Save Selected Layer writes MedVL overlays in the export formats.

One writer per format (GeoJSON for QuPath, PNG composite, pyramidal TIFF heatmap, CSV
table), each for one selected layer. Heatmap and attention layers (images) and TopK
overlays (the boxes shapes layer or the importance image) go through the same engine
exporters as the Export dock (:func:`napari_medvl._export_job.export_layer_metadata`), so a
saved file equals an exported one, written atomically. A layer MedVL did not make, or a
format it has no writer for, gives one sentence as a notification and no file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from napari_medvl._notify import report_error

__all__ = ["write_csv", "write_geojson", "write_png", "write_tiff"]


def _write(path: str, attributes: dict[str, Any], suffix: str) -> list[str]:
    from medvl_engine.errors import MedVLError
    from napari_medvl._export_job import export_layer_metadata

    target = Path(path)
    if target.suffix.lower() != suffix:
        target = target.with_name(target.name + suffix)
    try:
        written = export_layer_metadata(attributes.get("metadata") or {}, target)
    except MedVLError as error:
        report_error(error)
        return []
    return [str(written)]


def write_geojson(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """QuPath GeoJSON of a heatmap (tiles with score measurements) or of TopK boxes."""
    return _write(path, attributes, ".geojson")


def write_png(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """PNG composite: the heatmap over the slide thumbnail, or the TopK breast image."""
    return _write(path, attributes, ".png")


def write_tiff(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """Pyramidal TIFF of a heatmap aligned with the slide (heatmap layers only)."""
    return _write(path, attributes, ".tiff")


def write_csv(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """CSV table: one row per patch (heatmap) or per TopK box."""
    return _write(path, attributes, ".csv")
