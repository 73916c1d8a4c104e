"""Plain-data exports: .npz (scores, coords, grid and its transform) and CSV tables.

Every CSV row ends with the columns ``model`` (the model that made the scores) and ``notice``
("demo model trained on synthetic data, not for diagnosis" for a demo model, else empty);
the .npz holds the same two strings.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.common.atomic import atomic_write
from medvl_engine.common.model_label import model_metadata

if TYPE_CHECKING:
    from medvl_engine.heatmap import Heatmap

__all__ = ["write_boxes_csv", "write_npz", "write_patches_csv"]


def write_npz(
    path: str | Path,
    heatmap: Heatmap,
    coords: np.ndarray,
    patch_size_level0: int,
    mpp: tuple[float, float] | None = None,
    slide_dimensions: tuple[int, int] | None = None,
    model: str | Path | None = None,
) -> Path:
    """Scores [N], coords [N, 2] (x, y) level-0 px, the grid and its world transform.

    ``mpp`` is stored as NaN and ``slide_dimensions`` as -1 when unknown.
    """
    provenance = model_metadata(model)
    # Any: numpy types **kwds of savez_compressed as if they could reach allow_pickle
    arrays: dict[str, Any] = {
        "mpp": np.asarray(mpp if mpp is not None else (np.nan, np.nan), np.float64),
        "slide_dimensions": np.asarray(slide_dimensions or (-1, -1), np.int64),
        "scores": np.asarray(heatmap.scores, np.float32),
        "coords": np.asarray(coords, np.int64),
        "patch_size_level0": np.int64(patch_size_level0),
        "grid": np.asarray(heatmap.grid, np.float32),
        "origin_level0": np.asarray(heatmap.origin_level0, np.int64),
        "cell_size_level0": np.int64(heatmap.cell_size_level0),
        "scale": np.asarray(heatmap.scale, np.float64),
        "translate": np.asarray(heatmap.translate, np.float64),
        "value_range": np.asarray(heatmap.value_range, np.float64),
        "units": np.str_(heatmap.units),
        "prompt": np.str_(heatmap.prompt),
        "mode": np.str_(heatmap.mode),
        "normalize": np.str_(heatmap.normalize),
        "model": np.str_(provenance["model"]),
        "notice": np.str_(provenance["notice"]),
    }

    def write(temporary: Path) -> None:
        with open(temporary, "wb") as handle:
            np.savez_compressed(handle, **arrays)

    return atomic_write(path, write)


def write_patches_csv(
    path: str | Path,
    coords: np.ndarray,
    patch_size_level0: int,
    scores: np.ndarray,
    prompt: str = "",
    model: str | Path | None = None,
) -> Path:
    """One row per patch: x0, y0, x1, y1 (level-0 px), score, prompt, model, notice."""
    label = list(model_metadata(model).values())
    size = patch_size_level0
    rows = [
        [int(x), int(y), int(x) + size, int(y) + size, _num(s), prompt, *label]
        for (x, y), s in zip(np.asarray(coords), np.asarray(scores), strict=True)
    ]
    header = ["x0", "y0", "x1", "y1", "score", "prompt", "model", "notice"]
    return _write_csv(path, header, rows)


def write_boxes_csv(
    path: str | Path,
    boxes: np.ndarray,
    scores: np.ndarray | None = None,
    prompt: str = "",
    model: str | Path | None = None,
) -> Path:
    """One row per box, best first: rank, x0, y0, x1, y1 (level-0 px), score, prompt, model,
    notice."""
    boxes = np.asarray(boxes).reshape(-1, 4)
    label = list(model_metadata(model).values())
    rows = [
        [
            rank,
            *(int(v) for v in box),
            "" if scores is None else _num(scores[rank - 1]),
            prompt,
            *label,
        ]
        for rank, box in enumerate(boxes, start=1)
    ]
    header = ["rank", "x0", "y0", "x1", "y1", "score", "prompt", "model", "notice"]
    return _write_csv(path, header, rows)


def _num(value: float) -> str:
    return "" if not np.isfinite(value) else f"{float(value):.6g}"


def _write_csv(path: str | Path, header: list[str], rows: list[list[Any]]) -> Path:
    def write(temporary: Path) -> None:
        with open(temporary, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(rows)

    return atomic_write(path, write)
