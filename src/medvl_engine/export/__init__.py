"""Exports of heatmaps and boxes: QuPath GeoJSON, PNG/JPEG composites, pyramidal TIFF, .npz, CSV.

All slide coordinates are level-0 px with the origin at the slide's top-left (QuPath's
convention); TopK-Patch boxes are in each mammogram view's own px. Every file is written to a
temporary file in the same folder and renamed, so a failure never leaves a partial file.

- :mod:`.heatmap`: :func:`export_heatmap` picks the format from the suffix; .npz read back.
- :mod:`.geojson`: patch tiles, iso-contours and boxes as QuPath GeoJSON.
- :mod:`.image`: PNG/JPEG composites of a heatmap over its slide, with legend and footer.
- :mod:`.tiff`: pyramidal TIFF heatmaps aligned to the slide.
- :mod:`.tables`: .npz and CSV tables of patches and boxes.
- :mod:`.topk`: the GeoJSON, CSV and PNG files of a TopK-Patch result.
"""

from medvl_engine.export.geojson import (
    boxes_geojson,
    heatmap_contours_geojson,
    heatmap_tiles_geojson,
    write_geojson,
)
from medvl_engine.export.heatmap import (
    EXPORT_SUFFIXES,
    PatchLayout,
    export_heatmap,
    load_heatmap_npz,
)
from medvl_engine.export.image import composite_image, write_image
from medvl_engine.export.tables import write_boxes_csv, write_npz, write_patches_csv
from medvl_engine.export.tiff import (
    TIFF_VALUES,
    heatmap_on_slide,
    heatmap_tiff_downsample,
    read_heatmap_tiff_description,
    write_heatmap_tiff,
)
from medvl_engine.export.topk import render_topk_png, topk_geojson, write_topk_outputs

__all__ = [
    "EXPORT_SUFFIXES",
    "PatchLayout",
    "TIFF_VALUES",
    "boxes_geojson",
    "composite_image",
    "export_heatmap",
    "heatmap_contours_geojson",
    "heatmap_on_slide",
    "heatmap_tiles_geojson",
    "heatmap_tiff_downsample",
    "load_heatmap_npz",
    "read_heatmap_tiff_description",
    "render_topk_png",
    "topk_geojson",
    "write_boxes_csv",
    "write_geojson",
    "write_heatmap_tiff",
    "write_image",
    "write_npz",
    "write_patches_csv",
    "write_topk_outputs",
]
