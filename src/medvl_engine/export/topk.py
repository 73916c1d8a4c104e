"""Files of a TopK-Patch result: GeoJSON (QuPath), CSV (+ importance .npy), PNG overlay.

Boxes are written in each source view's own pixels, (x, y) with the origin at the top-left
(QuPath's convention), clipped to the view; the ``image`` field holds the view's file name,
never its folder. Every file names the model that made it (GeoJSON ``model`` property and
``"medvl"`` metadata, CSV ``model`` / ``notice`` columns, PNG footer and text chunks) and,
for a demo model, carries "demo model trained on synthetic data, not for diagnosis". All
writers go through a temporary file in the target folder that is renamed when complete, so a
failed export never leaves a half-written file.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from medvl_engine.common.atomic import atomic_write_stream
from medvl_engine.common.model_label import model_footer, model_metadata
from medvl_engine.errors import ExportError
from medvl_engine.export.image import with_footer

if TYPE_CHECKING:
    from medvl_engine.models.topksiglip_inference import TopKResult

__all__ = ["render_topk_png", "topk_geojson", "write_topk_outputs"]

VIEWS = ("CC", "MLO")


def _rows(result: TopKResult) -> list[tuple[str, int, float, np.ndarray]]:
    rows = []
    for view in VIEWS:
        for rank, score, box in zip(
            result.ranks[view], result.scores[view], result.boxes[view], strict=True
        ):
            rows.append((view, int(rank), float(score), np.asarray(box, dtype=np.float64)))
    return sorted(rows, key=lambda r: r[1])


def topk_geojson(
    result: TopKResult, sources: dict[str, Path], model: str | Path | None = None
) -> dict[str, Any]:
    """A GeoJSON FeatureCollection: one Polygon per patch in its view's source px."""
    provenance = model_metadata(model)
    named = {key: value for key, value in provenance.items() if value}
    features = []
    for view, rank, score, (x0, y0, x1, y1) in _rows(result):
        ring = [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]
        features.append(
            {
                "type": "Feature",
                "geometry": {
                    "type": "Polygon",
                    "coordinates": [[[float(a), float(b)] for a, b in ring]],
                },
                "properties": {
                    "objectType": "annotation",
                    "classification": {"name": "TopK patch"},
                    "name": f"{view} #{rank}",
                    "view": view,
                    "image": _file_name(sources.get(view)),
                    "rank": rank,
                    "score": score,
                    "measurements": {"rank": float(rank), "score": score},
                    **named,
                },
            }
        )
    return {
        "type": "FeatureCollection",
        "features": features,
        "medvl": {
            **provenance,
            "importance": np.asarray(result.importance, dtype=float).round(8).tolist(),
            "importance_frame": "candidate grid [G, G] over the breast image (CC top, MLO bottom)",
            "importance_cell_bounds": np.asarray(result.cell_bounds, dtype=float).tolist(),
            "zero_shot": result.zero_shot,
        },
    }


def render_topk_png(
    result: TopKResult,
    breast: np.ndarray,
    max_side: int = 1536,
    model: str | Path | None = None,
) -> bytes:
    """PNG bytes: the breast image in gray, the importance map in red, boxes with their ranks
    (yellow on a black outline), and a footer naming ``model`` with its demo notice."""
    from PIL import Image, ImageDraw, ImageFont, PngImagePlugin

    image = np.clip(np.asarray(breast, dtype=np.float32), 0.0, 1.0)
    size = image.shape[0]
    importance = np.asarray(result.importance, dtype=np.float32)
    grid = importance.shape[0]
    heat = importance / importance.max() if importance.max() > 0 else importance
    bounds = np.asarray(result.cell_bounds, dtype=np.float64)
    bounds = bounds * (size / bounds[-1])  # the engine's cell edges, in this image's px
    centres = np.arange(size) + 0.5
    cells = np.clip(np.searchsorted(bounds, centres, side="right") - 1, 0, grid - 1)
    heat_px = heat[np.ix_(cells, cells)]
    gray = (image * 255).astype(np.uint8)
    rgb = np.stack([gray, gray, gray], axis=-1).astype(np.float32)
    alpha = 0.45 * heat_px[..., None]
    rgb = rgb * (1 - alpha) + np.array([255.0, 40.0, 0.0]) * alpha
    canvas = Image.fromarray(rgb.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    draw.line([(0, size // 2), (size, size // 2)], fill=(80, 160, 255), width=max(size // 512, 1))
    width = max(size // 384, 1)
    font = ImageFont.load_default(size=max(11, size // 48))
    for rank, (x0, y0, x1, y1) in enumerate(result.breast_boxes, start=1):
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=(0, 0, 0), width=width + 2)
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=(255, 230, 0), width=width)
        draw.text(
            (x0 + 2 * width + 2, y0 + width + 1),
            str(rank),
            fill=(255, 230, 0),
            font=font,
            stroke_width=max(1, width),
            stroke_fill=(0, 0, 0),
        )
    if size > max_side:
        canvas = canvas.resize((max_side, max_side))
    canvas = with_footer(canvas, model_footer(model))
    info = PngImagePlugin.PngInfo()
    for key, value in model_metadata(model).items():
        if value:
            info.add_itxt(f"medvl:{key}", value)
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG", pnginfo=info)
    return buffer.getvalue()


def write_topk_outputs(
    result: TopKResult,
    breast: np.ndarray,
    sources: dict[str, Path],
    outputs: Sequence[Path],
    model: str | Path | None = None,
) -> list[Path]:
    """Write each output by its extension (.geojson, .csv + _importance.npy, .png); return paths.

    ``model`` (registry name or folder) is named in every file, with the demo notice for a
    demo model.
    """
    label = list(model_metadata(model).values())
    written = []
    for path in outputs:
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".geojson":
            document = topk_geojson(result, sources, model)
            written.append(
                atomic_write_stream(path, functools.partial(json.dump, document, indent=1))
            )
        elif suffix == ".csv":

            def write_csv(handle: IO[str]) -> None:
                writer = csv.writer(handle)
                writer.writerow(
                    ["view", "rank", "score", "x0", "y0", "x1", "y1", "image", "model", "notice"]
                )
                for view, rank, score, box in _rows(result):
                    writer.writerow(
                        [
                            view,
                            rank,
                            f"{score:.6g}",
                            *[f"{v:.2f}" for v in box],
                            _file_name(sources.get(view)),
                            *label,
                        ]
                    )

            written.append(atomic_write_stream(path, write_csv))
            npy = path.with_name(f"{path.stem}_importance.npy")
            written.append(
                atomic_write_stream(
                    npy,
                    functools.partial(np.save, arr=np.asarray(result.importance, np.float32)),
                    binary=True,
                )
            )
        elif suffix == ".png":
            data = render_topk_png(result, breast, model=model)
            written.append(
                atomic_write_stream(path, functools.partial(_write_bytes, data), binary=True)
            )
        else:
            raise ExportError(
                f"output {path} has an unsupported extension; use .geojson, .csv or .png.", path
            )
    return written


def _file_name(source: Path | str | None) -> str:
    """The view's file name only: a folder path can name the patient or the hospital share."""
    return Path(source).name if source else ""


def _write_bytes(data: bytes, handle: IO[bytes]) -> None:
    handle.write(data)
