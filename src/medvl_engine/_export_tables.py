"""Plain-data exports: .npz (scores, coords, grid and its transform) and CSV tables."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine._atomic import atomic_write

__all__ = ["write_boxes_csv", "write_npz", "write_patches_csv"]


def write_npz(
    path: str | Path,
    heatmap: Any,
    coords: np.ndarray,
    patch_size_level0: int,
    mpp: tuple[float, float] | None = None,
    slide_dimensions: tuple[int, int] | None = None,
) -> Path:
    """Scores [N], coords [N, 2] (x, y) level-0 px, the grid and its world transform.

    ``mpp`` is stored as NaN and ``slide_dimensions`` as -1 when unknown.
    """
    arrays = {
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
) -> Path:
    """One row per patch: x0, y0, x1, y1 (level-0 px), score, prompt."""
    rows = [
        [int(x), int(y), int(x) + patch_size_level0, int(y) + patch_size_level0, _num(s), prompt]
        for (x, y), s in zip(np.asarray(coords), np.asarray(scores), strict=True)
    ]
    return _write_csv(path, ["x0", "y0", "x1", "y1", "score", "prompt"], rows)


def write_boxes_csv(
    path: str | Path, boxes: np.ndarray, scores: np.ndarray | None = None, prompt: str = ""
) -> Path:
    """One row per box, best first: rank, x0, y0, x1, y1 (level-0 px), score, prompt."""
    boxes = np.asarray(boxes).reshape(-1, 4)
    rows = [
        [rank, *(int(v) for v in box), "" if scores is None else _num(scores[rank - 1]), prompt]
        for rank, box in enumerate(boxes, start=1)
    ]
    return _write_csv(path, ["rank", "x0", "y0", "x1", "y1", "score", "prompt"], rows)


def _num(value: float) -> str:
    return "" if not np.isfinite(value) else f"{float(value):.6g}"


def _write_csv(path: str | Path, header: list[str], rows: list[list[Any]]) -> Path:
    def write(temporary: Path) -> None:
        with open(temporary, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(rows)

    return atomic_write(path, write)
