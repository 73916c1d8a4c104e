"""medvl's own DICOM results of a small DICOM slide, written by its exporters: a heatmap
Parametric Map and the top patches as bulk annotations (other tools' objects are in
``highdicom_results``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.dicom_wsi import write_dicom_wsi

CELL = 32
"""Level-0 px of a heatmap cell (the map is 8 x 10 cells on a 256 x 320 px slide)."""


def write_slide_with_results(folder: Path, levels: int) -> tuple[list[Path], Path, Path]:
    """A ``levels``-level DICOM slide (256 x 320 px, 0.5 um/px, 64 px tiles) in
    ``folder/slide``, and in ``folder/out`` its "tumor" heatmap (8 x 10 cells of ``CELL`` px,
    scores 0 .. 1 in row order) as ``map.dcm`` and two top patches, boxes (x0, y0, x1, y1)
    level-0 px (32, 64, 64, 96) and (128, 0, 160, 32) scored 0.9 and 0.7, as ``top.dcm``.

    Returns (the slide's files, level 0 first; the map; the annotations)."""
    from medvl_engine.export.dicom import (
        write_heatmap_parametric_map,
        write_top_patches_annotations,
    )
    from medvl_engine.heatmap import Heatmap

    image = np.random.default_rng(3).integers(0, 255, (256, 320, 3), dtype=np.uint8)
    files = write_dicom_wsi(folder / "slide", image, mpp=0.5, tile=64, levels=levels)
    grid = np.linspace(0, 1, 8 * 10, dtype=np.float32).reshape(8, 10)
    heatmap = Heatmap(
        grid=grid,
        scores=grid.ravel(),
        origin_level0=(0, 0),
        cell_size_level0=CELL,
        scale=(16.0, 16.0),
        translate=(8.0, 8.0),
        units="um",
        prompt="tumor",
        value_range=(0.0, 1.0),
        metadata={"encoder": "medvl-demo"},
    )
    out = folder / "out"
    out.mkdir()
    pm = write_heatmap_parametric_map(out / "map.dcm", heatmap, files[0])
    boxes = np.array([[32, 64, 64, 96], [128, 0, 160, 32]])
    scores = [0.9, 0.7]
    ann = write_top_patches_annotations(out / "top.dcm", boxes, scores, files[0], prompt="tumor")
    return files, pm, ann
