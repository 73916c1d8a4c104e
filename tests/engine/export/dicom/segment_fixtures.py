"""A small tissue map of a synthetic DICOM WSI, built by hand (no model): three classes on a
32 px grid that starts one cell right of the slide's corner, with an uncertain patch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from medvl_engine.segmentation import ClassMap, SegmentResult, area_table, class_regions

SLIDE_SIZE = (400, 300)  # (width, height) level-0 px
CELL = 32
ORIGIN = (32, 0)  # (x, y) level-0 px of the map's first cell
NAMES = ["breast tumor", "breast stroma", "fat"]
CLASSES = {
    "breast tumor": ("breast tumor", "breast carcinoma"),
    "breast stroma": ("breast stroma", "breast connective tissue"),
    "fat": ("fat", "adipose tissue"),
}
TEMPLATES = ("an image of {}.", "{}, H&E.")


def map_labels() -> np.ndarray:
    """int16 [9, 12]: 0 no tissue, 1..3 the classes, 4 uncertain; a stroma island of 2 x 2
    cells inside the tumour."""
    labels = np.zeros((9, 12), np.int16)
    labels[1:6, 1:7] = 1
    labels[2:4, 2:4] = 2
    labels[6:9, 2:11] = 2
    labels[1:4, 8:12] = 4
    return labels


def segment_result(model: str | Path = "medvl-demo") -> SegmentResult:
    """The hand-made map as a :class:`SegmentResult` (regions with no minimum area)."""
    labels = map_labels()
    rows, cols = labels.shape
    mapped = ClassMap(
        names=list(NAMES),
        labels=labels,
        probabilities=np.zeros((len(NAMES), rows, cols), np.float32),
        confidence=np.where(labels > 0, 0.9, np.nan).astype(np.float32),
        patch_probabilities=np.zeros((0, len(NAMES)), np.float32),
        origin_level0=ORIGIN,
        cell_size_level0=CELL,
        mpp=(0.5, 0.5),
        slide_dimensions=SLIDE_SIZE,
        min_confidence=0.5,
        logit_scale=100.0,
    )
    regions = class_regions(mapped, min_area_um2=0.0)
    return SegmentResult(
        class_map=mapped,
        regions=regions,
        table=area_table(mapped, regions),
        store=None,  # type: ignore[arg-type]  # the writers never read the features
        model=str(model),
        templates=TEMPLATES,
        classes=dict(CLASSES),
    )


def labels_on_source_grid() -> np.ndarray:
    """The map's labels on the source's 32 px grid (13 x 10 cells): shifted one column."""
    width, height = SLIDE_SIZE
    grid = np.zeros((-(-height // CELL), -(-width // CELL)), np.int16)
    labels = map_labels()
    grid[: labels.shape[0], 1 : 1 + labels.shape[1]] = labels
    return grid
