"""The candidate grid of TopK-Patch: the paper's geometry and ROI boxes rasterised on it."""

from __future__ import annotations

import numpy as np

from medvl_engine.data.patch_geometry import PatchGeometry, rasterize_boxes


def test_paper_geometry():
    geom = PatchGeometry.from_image(1536, 16, 0.5)
    assert (geom.patch_size, geom.stride, geom.offset) == (181, 90, 2)
    assert geom.num_candidates == 256
    origins = geom.origins()
    assert origins.shape == (256, 2)
    # Row-major: candidate 1 is one step right (x), candidate 16 one step down (y).
    assert origins[0].tolist() == [2, 2]
    assert origins[1].tolist() == [92, 2]
    assert origins[16].tolist() == [2, 92]
    assert origins.max() + 181 <= 1536
    overlap = 1 - geom.stride / geom.patch_size
    assert 0.49 < overlap < 0.51
    edges = geom.cell_bounds()
    assert edges[0] == 0 and edges[-1] == 1536 and np.all(np.diff(edges) > 0)


def test_rasterize_boxes_marks_cells_under_box():
    geom = PatchGeometry.from_image(1536, 16, 0.5)
    mask = rasterize_boxes([[700, 100, 720, 110]], geom)
    assert mask.sum() == 1
    row, col = np.argwhere(mask)[0]
    x0, y0, x1, y1 = geom.boxes([row * 16 + col])[0]
    assert x0 <= 710 <= x1 and y0 <= 105 <= y1
    assert rasterize_boxes(np.zeros((0, 4)), geom).sum() == 0
    big = rasterize_boxes([[0, 0, 1536, 1536]], geom)
    assert big.sum() == 256
