"""The TopK PNG paints the importance map on the engine's own cell edges."""

from __future__ import annotations

import numpy as np
from PIL import Image

from medvl_engine.export import write_topk_outputs
from medvl_engine.models.topksiglip_inference import TopKResult


def _result(bounds: np.ndarray) -> TopKResult:
    importance = np.zeros((4, 4), dtype=np.float32)
    importance[0, 0] = 1.0  # only the top-left cell is important
    empty = {"CC": np.zeros((0, 4)), "MLO": np.zeros((0, 4))}
    return TopKResult(
        boxes=empty,
        ranks={"CC": np.zeros(0, int), "MLO": np.zeros(0, int)},
        scores={"CC": np.zeros(0), "MLO": np.zeros(0)},
        breast_boxes=np.zeros((0, 4)),
        breast_scores=np.zeros(0),
        importance=importance,
        cell_bounds=bounds,
        zero_shot={},
        embedding=np.zeros(4, dtype=np.float32),
    )


def test_png_and_geojson_follow_uneven_cell_edges(tmp_path):
    import json

    bounds = np.array([0.0, 40.0, 64.0, 88.0, 128.0])  # outer cells wider than inner ones
    breast = np.full((128, 128), 0.5, dtype=np.float32)
    png, geojson = write_topk_outputs(
        _result(bounds), breast, {}, [tmp_path / "t.png", tmp_path / "t.geojson"]
    )
    with Image.open(png) as image:
        pixels = np.asarray(image.convert("RGB")).astype(int)
    red_minus_green = pixels[..., 0] - pixels[..., 1]
    tinted = red_minus_green > 20
    assert tinted[:40, :40].all()  # the whole first cell, 40 px wide
    assert not tinted[40:, :].any() and not tinted[:, 40:].any()
    document = json.loads(geojson.read_text())
    assert document["medvl"]["importance_cell_bounds"] == bounds.tolist()
