"""The file types a heatmap exports to, by suffix (no exporter imported: commands check their
``--out`` names with it before any heavy library loads)."""

from __future__ import annotations

__all__ = ["EXPORT_SUFFIXES"]

EXPORT_SUFFIXES = (".geojson", ".json", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".npz", ".csv")
