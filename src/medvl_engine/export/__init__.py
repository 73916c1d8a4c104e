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

Importing this package loads no torch: each name is imported from its module on first use.
"""

from medvl_engine.common.lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "EXPORT_SUFFIXES": "formats",
        "PatchLayout": "heatmap",
        "TIFF_VALUES": "tiff",
        "boxes_geojson": "geojson",
        "composite_image": "image",
        "export_heatmap": "heatmap",
        "heatmap_contours_geojson": "geojson",
        "heatmap_on_slide": "tiff",
        "heatmap_tiff_downsample": "tiff",
        "heatmap_tiles_geojson": "geojson",
        "load_heatmap_npz": "heatmap",
        "read_heatmap_tiff_description": "tiff",
        "render_topk_png": "topk",
        "topk_geojson": "topk",
        "write_boxes_csv": "tables",
        "write_geojson": "geojson",
        "write_heatmap_tiff": "tiff",
        "write_image": "image",
        "write_npz": "tables",
        "write_patches_csv": "tables",
        "write_topk_outputs": "topk",
    },
)
