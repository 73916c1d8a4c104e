"""The files of a segmentation: QuPath GeoJSON regions, a CSV of areas, a PNG of the class map.

GeoJSON: one Feature per region, a Polygon whose first ring is the outline and the others its
holes, (x, y) level-0 px with the origin at the slide's top-left; ``properties`` hold
``objectType`` "annotation", ``classification`` {"name", "color": [r, g, b]} and
``measurements`` {"Area um^2": ...} ("Area px^2" for a slide without an mpp), as QuPath
imports them, plus the model (and the demo notice for a demo model). The collection's
``"medvl"`` object names the model, the classes and their names, the templates and the
area table. The CSV has one row per class and "uncertain"; the PNG shows the classes over
the slide with a legend of colours and shares of tissue. Every file is written atomically.
For a DICOM whole-slide image, :mod:`medvl_engine.export.dicom.wsi_segment` writes the same
result as DICOM.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.common.atomic import atomic_write
from medvl_engine.common.model_label import model_footer, model_metadata

if TYPE_CHECKING:
    from medvl_engine.segmentation import SegmentResult

__all__ = [
    "REGION_SUFFIXES",
    "class_colors",
    "class_map_image",
    "export_segmentation",
    "regions_geojson",
    "write_areas_csv",
]

REGION_SUFFIXES = (".geojson", ".csv", ".png")
_PALETTE = (
    (214, 39, 40),
    (44, 160, 44),
    (31, 119, 180),
    (255, 187, 120),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (188, 189, 34),
    (23, 190, 207),
    (255, 127, 14),
)
_UNCERTAIN_COLOR = (128, 128, 128)


def class_colors(count: int) -> list[tuple[int, int, int]]:
    """Colours of label values 1..count + 1: ``count`` classes, then grey for "uncertain"."""
    return [_PALETTE[i % len(_PALETTE)] for i in range(count)] + [_UNCERTAIN_COLOR]


def regions_geojson(result: SegmentResult) -> dict[str, Any]:
    """The QuPath FeatureCollection of ``result``'s regions (module docstring)."""
    colours = class_colors(len(result.names))
    metric = "Area um^2" if result.class_map.mpp is not None else "Area px^2"
    provenance = {k: v for k, v in model_metadata(result.model).items() if v}
    features = []
    for region in result.regions:
        area = region.area_um2 if region.area_um2 is not None else region.area_px2
        features.append(
            {
                "type": "Feature",
                "geometry": {
                    "type": "Polygon",
                    "coordinates": [np.round(ring, 2).tolist() for ring in region.rings],
                },
                "properties": {
                    "objectType": "annotation",
                    "name": region.name,
                    "classification": {
                        "name": region.name,
                        "color": list(colours[region.label - 1]),
                    },
                    "measurements": {metric: float(area)},
                    **provenance,
                },
            }
        )
    metadata = {
        **model_metadata(result.model),
        "classes": {name: list(names) for name, names in result.classes.items()},
        "templates": None if result.templates is None else list(result.templates),
        "areas": result.table,
        "notes": result.notes,
    }
    return {"type": "FeatureCollection", "features": features, "medvl": metadata}


def write_areas_csv(path: str | Path, result: SegmentResult) -> Path:
    """One row per class and "uncertain": area (um^2, px^2), share of tissue, cells, regions."""
    import csv

    header = ["class", "area_um2", "area_px2", "share_of_tissue", "cells", "regions"]
    header += ["region_area_um2", "model"]
    model = model_metadata(result.model)["model"]

    def number(value: float | None) -> str:
        return "" if value is None else f"{float(value):.6g}"

    def write(temporary: Path) -> None:
        with open(temporary, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for row in result.table:
                writer.writerow(
                    [
                        row["class"],
                        number(row["area_um2"]),
                        number(row["area_px2"]),
                        f"{row['share_of_tissue']:.6g}",
                        row["cells"],
                        row["regions"],
                        number(row["region_area_um2"]),
                        model,
                    ]
                )

    return atomic_write(path, write)


def class_map_image(
    result: SegmentResult, slide: Any = None, *, max_size: int = 2048, alpha: float = 0.5
) -> np.ndarray:
    """uint8 RGB: the classes coloured over the slide's thumbnail (longest side at most
    ``max_size``; white without a slide), a legend of colours, names and shares of tissue on
    the right, and a footer naming the model."""
    from PIL import Image, ImageDraw, ImageFont

    from medvl_engine.export.image import sample_grid, with_footer

    mapped = result.class_map
    width0, height0 = mapped.slide_dimensions
    if slide is not None:
        base = np.ascontiguousarray(np.asarray(slide.thumbnail(max_size))[..., :3])
    else:
        factor = max_size / max(width0, height0, 1)
        shape = (max(1, round(height0 * factor)), max(1, round(width0 * factor)))
        base = np.full((*shape, 3), 255, np.uint8)
    height, width = base.shape[:2]
    labels = sample_grid(
        mapped.labels.astype(np.float32),
        mapped.origin_level0,
        mapped.cell_size_level0,
        (height, width),
        (width0 / width, height0 / height),
    )
    labels = np.nan_to_num(labels, nan=0.0).astype(np.int64)
    palette = np.array([(0, 0, 0), *class_colors(len(mapped.names))], np.float32)
    shown = (labels > 0)[..., None]
    blended = np.where(shown, (1 - alpha) * base + alpha * palette[labels], base)
    image = Image.fromarray(np.clip(blended + 0.5, 0, 255).astype(np.uint8))
    unit = max(1.0, height / 770)
    font = ImageFont.load_default(size=round(11 * unit))
    entries = _legend_entries(result)
    probe = ImageDraw.Draw(image)
    text_width = max(probe.textlength(text, font=font) for text, _ in entries)
    legend_width = round(40 * unit + text_width)
    line = round(16 * unit)
    canvas_height = max(height, round(12 * unit) + line * len(entries))
    canvas = Image.new("RGB", (width + legend_width, canvas_height), (255, 255, 255))
    canvas.paste(image, (0, 0))
    draw = ImageDraw.Draw(canvas)
    for number, (text, colour) in enumerate(entries):
        y = round(8 * unit) + number * line
        box = [width + round(8 * unit), y, width + round(20 * unit), y + round(12 * unit)]
        draw.rectangle(box, fill=tuple(colour), outline=(0, 0, 0))
        draw.text((width + round(26 * unit), y), text, fill=(0, 0, 0), font=font)
    return np.asarray(with_footer(canvas, model_footer(result.model)))


def _legend_entries(result: SegmentResult) -> list[tuple[str, Sequence[int]]]:
    colours = class_colors(len(result.names))
    entries: list[tuple[str, Sequence[int]]] = []
    for row, colour in zip(result.table, colours, strict=True):
        entries.append((f"{row['class']}: {100 * row['share_of_tissue']:.1f}%", colour))
    return entries


def export_segmentation(
    path: str | Path, result: SegmentResult, slide: Any = None, *, max_size: int = 2048
) -> Path:
    """Write ``result`` as ``path``'s suffix says: .geojson, .csv or .png."""
    from medvl_engine.errors import ConfigError

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".geojson":
        import json

        text = json.dumps(regions_geojson(result), separators=(",", ":"))
        return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
    if suffix == ".csv":
        return write_areas_csv(path, result)
    if suffix == ".png":
        from medvl_engine.export.image import write_image

        rgb = class_map_image(result, slide, max_size=max_size)
        return write_image(path, rgb, text={"medvl": model_footer(result.model)})
    raise ConfigError(
        f"Output {path.name} has an unknown type '{path.suffix}'; use one of "
        f"{', '.join(REGION_SUFFIXES)}."
    )
