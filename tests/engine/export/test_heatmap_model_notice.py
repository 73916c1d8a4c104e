"""Every export names the model that made it and carries the demo notice for demo models;
GeoJSON classes follow the scores; signed maps use the diverging map centred on 0."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from medvl_engine.colormaps import DIVERGING_MAP, SEQUENTIAL_MAP, apply_colormap
from medvl_engine.demo_models import DEMO_NOTICE
from medvl_engine.export import export_heatmap, read_heatmap_tiff_description
from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import similarity_map


def _store(encoder: str = "") -> FeatureStore:
    # 4 x 3 patches of 100 px; features on a quarter circle so cosine scores spread over [0, 1]
    coords = np.array([(x * 100, y * 100) for y in range(3) for x in range(4)], np.int64)
    angle = np.linspace(0, np.pi / 2, len(coords))
    features = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return FeatureStore(
        features,
        coords,
        patch_size_level0=100,
        patch_size=224,
        mpp=(0.5, 0.5),
        slide_dimensions=(400, 300),
        encoder=encoder,
    )


def _demo_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "my-demo-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"synthetic_demo": True}), encoding="utf-8")
    return folder


@pytest.fixture
def slide(tmp_path):
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    truth = make_synthetic_slide(tmp_path / "s.tiff", seed=4, size=(400, 300), compression="zlib")
    with open_slide(truth.path) as opened:
        yield opened


@pytest.mark.parametrize("model_kind", ["name", "folder"])
def test_every_heatmap_export_names_a_demo_model_and_its_notice(tmp_path, slide, model_kind):
    encoder = "medvl-demo" if model_kind == "name" else str(_demo_folder(tmp_path))
    shown = "medvl-demo" if model_kind == "name" else "my-demo-model"
    store = _store(encoder)
    heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), prompt="tumor")
    boxes = np.array([[0, 0, 100, 100]])
    out = {s: tmp_path / f"h{s}" for s in (".geojson", ".csv", ".tiff", ".png", ".npz")}
    for suffix, path in out.items():
        extra = {"boxes": boxes, "box_scores": np.array([0.9])} if suffix == ".geojson" else {}
        export_heatmap(path, heatmap, store, slide=slide, **extra)

    document = json.loads(out[".geojson"].read_text())
    assert document["medvl"]["model"] == shown and document["medvl"]["notice"] == DEMO_NOTICE
    for feature in document["features"]:  # tiles and the box alike
        assert feature["properties"]["model"] == shown
        assert feature["properties"]["notice"] == DEMO_NOTICE
    with open(out[".csv"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == store.n_patches
    assert {(row["model"], row["notice"]) for row in rows} == {(shown, DEMO_NOTICE)}
    description = read_heatmap_tiff_description(out[".tiff"])
    assert description["model"] == shown and description["notice"] == DEMO_NOTICE
    with Image.open(out[".png"]) as image:
        assert image.text["medvl:model"] == shown
        assert image.text["medvl:notice"] == DEMO_NOTICE
    with np.load(out[".npz"]) as data:
        assert str(data["model"]) == shown and str(data["notice"]) == DEMO_NOTICE


def test_a_model_that_is_not_a_demo_is_named_without_a_notice(tmp_path, slide):
    store = _store("plip")
    heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), prompt="tumor")
    document = json.loads(export_heatmap(tmp_path / "h.geojson", heatmap, store).read_text())
    assert document["medvl"] == {**document["medvl"], "model": "plip", "notice": ""}
    assert all("notice" not in f["properties"] for f in document["features"])
    with Image.open(export_heatmap(tmp_path / "h.png", heatmap, store, slide=slide)) as image:
        assert image.text["medvl:model"] == "plip" and "medvl:notice" not in image.text


def test_png_footer_holds_more_text_for_the_demo_notice(tmp_path, slide):
    ink = {}
    for encoder in ("plip", "medvl-demo"):
        store = _store(encoder)
        heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), prompt="tumor")
        path = export_heatmap(tmp_path / f"{encoder}.png", heatmap, store, slide=slide)
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        footer = pixels[max(300, 160) :, :]  # under the 400 x 300 thumbnail and the legend
        ink[encoder] = int((footer < 100).all(axis=-1).sum())  # dark text pixels
    assert ink["plip"] > 0
    # "model: medvl-demo - demo model trained on synthetic data, not for diagnosis"
    assert ink["medvl-demo"] > 3 * ink["plip"]


def test_geojson_classes_follow_the_scores(tmp_path):
    store = _store("medvl-demo")
    heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), prompt="tumor")
    document = json.loads(export_heatmap(tmp_path / "h.geojson", heatmap, store).read_text())
    scheme = document["medvl"]["classification"]
    assert scheme["by"] == "score bins" and scheme["measurement"] == "score"
    classes = {c["name"]: c for c in scheme["classes"]}
    assert len(classes) == 5
    scores = []
    for feature in document["features"]:
        properties = feature["properties"]
        score = properties["measurements"]["score"]
        chosen = classes[properties["classification"]["name"]]
        assert chosen["low"] - 1e-9 <= score <= chosen["high"] + 1e-9
        assert properties["classification"]["color"] == chosen["color"]
        scores.append(score)
    # higher scores never fall in a lower bin, and more than one class is used
    order = np.argsort(scores)
    names = [document["features"][i]["properties"]["classification"]["name"] for i in order]
    lows = [classes[name]["low"] for name in names]
    assert lows == sorted(lows) and len(set(names)) >= 3


def test_geojson_threshold_gives_two_named_classes(tmp_path):
    store = _store()
    heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), prompt="tumor")
    path = export_heatmap(tmp_path / "h.geojson", heatmap, store, threshold=0.62)
    document = json.loads(path.read_text())
    for feature in document["features"]:
        properties = feature["properties"]
        above = properties["score"] >= 0.62
        expected = "tumor: score >= 0.62" if above else "tumor: score < 0.62"
        assert properties["classification"]["name"] == expected
    assert document["medvl"]["classification"]["by"] == "score threshold"


def test_contrast_map_is_diverging_and_symmetric_in_every_export(tmp_path, slide):
    store = _store()
    # A = -(1, 1), B = (1, 1): every patch scores -sqrt(2) (cos + sin) < 0
    text = torch.tensor([[-1.0, -1.0], [1.0, 1.0]])
    heatmap = similarity_map(store, text, mode="contrast", prompt="tumor - stroma")
    assert heatmap.value_range[1] < 0
    m = max(abs(v) for v in heatmap.value_range)
    description = read_heatmap_tiff_description(export_heatmap(tmp_path / "h.tiff", heatmap, store))
    assert description["colormap"] == DIVERGING_MAP
    assert description["color_limits"] == pytest.approx([-m, m])
    document = json.loads(export_heatmap(tmp_path / "h.geojson", heatmap, store).read_text())
    assert document["medvl"]["colormap"] == DIVERGING_MAP
    # every score is negative: no tile is drawn red (red channel above blue)
    for feature in document["features"]:
        red, _, blue = feature["properties"]["color"]
        assert blue >= red
    expected = apply_colormap(np.array([(heatmap.scores[0] + m) / (2 * m)]), DIVERGING_MAP)[0]
    assert document["features"][0]["properties"]["color"] == expected.tolist()


def test_positive_maps_use_the_sequential_map(tmp_path):
    store = _store()
    heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), normalize="minmax", prompt="tumor")
    description = read_heatmap_tiff_description(export_heatmap(tmp_path / "h.tiff", heatmap, store))
    assert description["colormap"] == SEQUENTIAL_MAP
    assert description["color_limits"] == [0.0, 1.0]


def _topk_result():
    from medvl_engine.models.topksiglip_inference import TopKResult

    importance = np.full((4, 4), 1 / 16, dtype=np.float32)
    boxes = {"CC": np.array([[10.0, 10.0, 40.0, 40.0]]), "MLO": np.array([[5.0, 70, 35, 100]])}
    return TopKResult(
        boxes=boxes,
        ranks={"CC": np.array([1]), "MLO": np.array([2])},
        scores={"CC": np.array([0.6]), "MLO": np.array([0.3])},
        breast_boxes=np.array([[10.0, 10.0, 40.0, 40.0], [5.0, 70.0, 35.0, 100.0]]),
        breast_scores=np.array([0.6, 0.3]),
        importance=importance,
        cell_bounds=np.linspace(0, 128, 5),
        zero_shot={},
        embedding=np.zeros(4, dtype=np.float32),
    )


def test_topk_files_name_the_demo_model_and_its_notice(tmp_path):
    from medvl_engine.export import write_topk_outputs

    breast = np.full((128, 128), 0.5, dtype=np.float32)
    targets = [tmp_path / "t.geojson", tmp_path / "t.csv", tmp_path / "t.png"]
    write_topk_outputs(_topk_result(), breast, {}, targets, model="topksiglip-demo")
    document = json.loads(targets[0].read_text())
    assert document["medvl"]["model"] == "topksiglip-demo"
    assert document["medvl"]["notice"] == DEMO_NOTICE
    assert [f["properties"]["notice"] for f in document["features"]] == [DEMO_NOTICE] * 2
    assert [f["properties"]["measurements"]["rank"] for f in document["features"]] == [1, 2]
    with open(targets[1], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["rank"], r["model"], r["notice"]) for r in rows] == [
        ("1", "topksiglip-demo", DEMO_NOTICE),
        ("2", "topksiglip-demo", DEMO_NOTICE),
    ]
    with Image.open(targets[2]) as image:
        assert image.text["medvl:notice"] == DEMO_NOTICE
        assert image.size[0] == 128 and image.size[1] > 128  # footer under the breast image


def test_export_dock_files_carry_the_layer_model(tmp_path):
    from napari_medvl._export_job import export_layer_metadata

    store = _store()  # the store names no encoder; the layer knows its model
    heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), prompt="tumor")
    metadata = {
        "medvl_kind": "heatmap",
        "heatmap": heatmap,
        "feature_store": store,
        "model": "medvl-demo",
    }
    path = export_layer_metadata(metadata, tmp_path / "dock.csv")
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["model"], r["notice"]) for r in rows} == {("medvl-demo", DEMO_NOTICE)}
    topk = {
        "medvl_kind": "topk",
        "topk_result": _topk_result(),
        "breast": type("Breast", (), {"image": np.full((128, 128), 0.5, np.float32)})(),
        "model": "topksiglip-demo",
    }
    document = json.loads(export_layer_metadata(topk, tmp_path / "dock.geojson").read_text())
    assert document["medvl"]["notice"] == DEMO_NOTICE
