"""The TopK PNG paints the importance map on the engine's own cell edges; every TopK file
carries the readouts, the K used beside the evaluated K, the model and its demo notice."""

from __future__ import annotations

import csv
import json

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


def test_every_topk_file_carries_the_readouts_k_model_and_notice(tmp_path):
    from medvl_engine.demo_models import DEMO_NOTICE

    result = _result(np.linspace(0.0, 128.0, 5))
    result.boxes["CC"] = np.array([[8.0, 8.0, 40.0, 40.0]])
    result.ranks["CC"], result.scores["CC"] = np.array([1]), np.array([0.4])
    result.breast_boxes = np.array([[8.0, 8.0, 40.0, 40.0]])
    result.zero_shot = {
        "cancer": {"negative": 0.25, "positive": 0.75},
        "architectural distortion": {"negative": 0.875, "positive": 0.125},
        "birads": {"1": 0.1, "2": 0.2, "3": 0.3, "4": 0.15, "5": 0.25},
    }
    result.k, result.evaluated_k, result.image_size = 1, 4, 128
    breast = np.full((128, 128), 0.5, dtype=np.float32)
    targets = [tmp_path / "t.csv", tmp_path / "t.geojson", tmp_path / "t.png"]
    table, _, document, png = write_topk_outputs(
        result, breast, {"CC": tmp_path / "a_L_CC.dcm"}, targets, model="topksiglip-demo"
    )
    with open(table, newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["p_cancer_positive"]) == 0.75
    assert float(row["p_architectural_distortion_positive"]) == 0.125
    assert [float(row[f"p_birads_{c}"]) for c in "12345"] == [0.1, 0.2, 0.3, 0.15, 0.25]
    assert (row["k"], row["evaluated_k"], row["image_size"]) == ("1", "4", "128")
    assert (row["model"], row["notice"], row["image"]) == (
        "topksiglip-demo",
        DEMO_NOTICE,
        "a_L_CC.dcm",
    )
    medvl = json.loads(document.read_text())["medvl"]
    assert medvl["zero_shot"] == result.zero_shot and medvl["k_is_evaluated"] is False
    assert medvl["k_note"] == (
        "K = 1 (the model was evaluated at K = 4; its reported metrics hold at that K)"
    )
    with Image.open(png) as image:
        assert json.loads(image.text["medvl:zero_shot"]) == result.zero_shot
        assert image.text["medvl:notice"] == DEMO_NOTICE
        assert json.loads(image.text["medvl:k"]) == 1
        assert json.loads(image.text["medvl:evaluated_k"]) == 4
