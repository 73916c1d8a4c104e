"""Files of a TopK-Patch result: GeoJSON (QuPath), CSV (+ importance .npy), PNG overlay.

Boxes are written in each source view's own pixels, (x, y) with the origin at the top-left
(QuPath's convention), clipped to the view; the ``image`` field holds the view's file name,
never its folder. Every file names the model that made it (GeoJSON ``model`` property and
``"medvl"`` metadata, CSV ``model`` / ``notice`` columns, PNG footer and text chunks) and,
for a demo model, carries "demo model trained on synthetic data, not for diagnosis". Every
file also carries what the TopK dock shows beside the boxes: the zero-shot readouts (GeoJSON
``"medvl"."zero_shot"``, CSV ``p_<task>_<class>`` columns, PNG ``medvl:zero_shot`` text
chunk) and the K used beside the K the model was evaluated with (:func:`k_sentence`). All
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
    from medvl_engine.models.topksiglip_results import TopKResult

__all__ = [
    "TOPK_PNG_SIDE",
    "k_sentence",
    "readout_columns",
    "render_topk_png",
    "topk_geojson",
    "write_topk_outputs",
]

VIEWS = ("CC", "MLO")
TOPK_PNG_SIDE = 768
"""Side the PNG of a small model image is enlarged to (at least), for ``display_side``."""


def k_sentence(k: int | None, evaluated_k: int | None) -> str:
    """What K a result was computed at, beside the K its model was evaluated with:
    ``K = 4 (the K the model was evaluated at)``, or ``K = 7 (the model was evaluated at
    K = 4; its reported metrics hold at that K)``; ``K = 7`` when either is unknown."""
    if k is None or evaluated_k is None:
        return "K unknown" if k is None else f"K = {k}"
    if k == evaluated_k:
        return f"K = {k} (the K the model was evaluated at)"
    return (
        f"K = {k} (the model was evaluated at K = {evaluated_k}; its reported metrics hold at "
        "that K)"
    )


def readout_columns(zero_shot: dict[str, dict[str, float]]) -> dict[str, float]:
    """The zero-shot readouts as CSV columns: ``p_<task>_<class>`` (spaces as ``_``), e.g.
    ``p_cancer_positive``, ``p_birads_5``, in the tasks' and classes' order (the CSV writes
    each with every digit, so it reads back as the same float)."""
    return {
        f"p_{task}_{name}".replace(" ", "_"): float(p)
        for task, classes in zero_shot.items()
        for name, p in classes.items()
    }


def _k_fields(result: TopKResult) -> dict[str, Any]:
    """K, the evaluated K, whether they agree, and the breast image side, as stored."""
    k, evaluated = getattr(result, "k", None), getattr(result, "evaluated_k", None)
    return {
        "k": k,
        "evaluated_k": evaluated,
        "k_is_evaluated": None if k is None or evaluated is None else k == evaluated,
        "image_size": getattr(result, "image_size", None),
    }


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
            **_k_fields(result),
            "k_note": k_sentence(result.k, result.evaluated_k),
        },
    }


def render_topk_png(
    result: TopKResult,
    breast: np.ndarray,
    max_side: int = 1536,
    model: str | Path | None = None,
    display_side: int | None = None,
) -> bytes:
    """PNG bytes: the breast image in gray, the importance map in red, boxes with their ranks
    (yellow on a black outline), and a footer naming ``model`` with its demo notice and K.

    breast: ``[S, S]`` the image the model scored (the result's boxes are in its px).
    display_side: a smaller image is enlarged by a whole factor (nearest pixel) to at least
    this side before the boxes are drawn, so a 256 px model image still reads; the boxes and
    cells are scaled by the same factor. Larger than ``max_side``, the picture is shrunk.
    """
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
    factor = max(1, -(-int(display_side) // size)) if display_side else 1
    if factor > 1:
        canvas = canvas.resize((size * factor, size * factor), Image.Resampling.NEAREST)
        size *= factor
    draw = ImageDraw.Draw(canvas)
    draw.line([(0, size // 2), (size, size // 2)], fill=(80, 160, 255), width=max(size // 512, 1))
    width = max(size // 384, 1)
    font = ImageFont.load_default(size=max(11, size // 48))
    for rank, box in enumerate(result.breast_boxes, start=1):
        x0, y0, x1, y1 = (float(v) * factor for v in box)
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
    footer = model_footer(model)
    if result.k is not None:
        footer += f"; {k_sentence(result.k, result.evaluated_k)}"
    canvas = with_footer(canvas, footer)
    info = PngImagePlugin.PngInfo()
    for key, value in model_metadata(model).items():
        if value:
            info.add_itxt(f"medvl:{key}", value)
    info.add_itxt("medvl:zero_shot", json.dumps(result.zero_shot))
    for key, field in _k_fields(result).items():
        if field is not None:
            info.add_itxt(f"medvl:{key}", json.dumps(field))
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG", pnginfo=info)
    return buffer.getvalue()


def write_topk_outputs(
    result: TopKResult,
    breast: np.ndarray,
    sources: dict[str, Path],
    outputs: Sequence[Path],
    model: str | Path | None = None,
    display_side: int | None = None,
) -> list[Path]:
    """Write each output by its extension (.geojson, .csv + _importance.npy, .png); return paths.

    ``model`` (registry name or folder) is named in every file, with the demo notice for a
    demo model. ``display_side``: the PNG's least side (see :func:`render_topk_png`; e.g.
    :data:`TOPK_PNG_SIDE`).
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
            write_csv = functools.partial(_write_csv, result, sources, label)
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
            data = render_topk_png(result, breast, model=model, display_side=display_side)
            written.append(
                atomic_write_stream(path, functools.partial(_write_bytes, data), binary=True)
            )
        else:
            raise ExportError(
                f"output {path} has an unsupported extension; use .geojson, .csv or .png.", path
            )
    return written


def _write_csv(
    result: TopKResult, sources: dict[str, Path], label: list[str], handle: IO[str]
) -> None:
    """One row per patch, best first: view, rank, score, box (source px), image, K, evaluated
    K, breast image side, the zero-shot readouts (:func:`readout_columns`), model, notice."""
    readouts = readout_columns(result.zero_shot)
    fields = _k_fields(result)
    writer = csv.writer(handle)
    writer.writerow(
        [
            *("view", "rank", "score", "x0", "y0", "x1", "y1", "image"),
            *("k", "evaluated_k", "image_size"),
            *readouts,
            *("model", "notice"),
        ]
    )
    constant = [
        *("" if fields[key] is None else fields[key] for key in ("k", "evaluated_k", "image_size")),
        *(repr(p) for p in readouts.values()),  # every digit: read back, the same float
        *label,
    ]
    for view, rank, score, box in _rows(result):
        writer.writerow(
            [
                view,
                rank,
                f"{score:.6g}",
                *[f"{v:.2f}" for v in box],
                _file_name(sources.get(view)),
                *constant,
            ]
        )


def _file_name(source: Path | str | None) -> str:
    """The view's file name only: a folder path can name the patient or the hospital share."""
    return Path(source).name if source else ""


def _write_bytes(data: bytes, handle: IO[bytes]) -> None:
    handle.write(data)
