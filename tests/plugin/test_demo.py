"""`medvl demo` headless: files written and readable; degradation when models are missing."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from PIL import Image

from medvl_engine.cli.main import main
from napari_medvl.demo import main as demo_main


@pytest.fixture
def headless(monkeypatch):
    monkeypatch.setenv("MEDVL_HEADLESS", "1")


def test_demo_writes_heatmap_and_topk_files_that_open(
    tmp_path, capsys, headless, medvl_cache, tiny_topk
):
    out = tmp_path / "demo"
    status = main(
        ["demo", "--out", str(out), "--topk-model", str(tiny_topk), "--k", "4"]
        + ["--slide-size", "2048x1344"]
    )
    assert status == 0
    printed = capsys.readouterr().out
    for name in ("heatmap.png", "heatmap.geojson", "top_patches.csv", "heatmap.tiff"):
        assert str(out / name) in printed

    with Image.open(out / "heatmap.png") as image:
        assert image.size[0] > 500 and image.mode == "RGB"
    collection = json.loads((out / "heatmap.geojson").read_text())
    assert collection["type"] == "FeatureCollection"
    assert len(collection["features"]) > 10
    first = collection["features"][0]
    ring = first["geometry"]["coordinates"][0]
    assert ring[0] == ring[-1]  # closed polygon, level-0 px
    assert "classification" in first["properties"]
    with open(out / "top_patches.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 10

    with Image.open(out / "topk.png") as image:
        assert image.size[0] > 100
    topk = json.loads((out / "topk.geojson").read_text())
    assert {f["properties"]["view"] for f in topk["features"] if "view" in f["properties"]} <= {
        "CC",
        "MLO",
    }
    with open(out / "topk.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 4
    assert not list(out.glob(".*"))  # no temporary files left behind


def test_demo_runs_end_to_end_when_models_are_missing(tmp_path, capsys, headless):
    out = tmp_path / "demo"
    status = main(
        [
            "demo",
            "--out",
            str(out),
            "--model",
            str(tmp_path / "no-encoder"),
            "--topk-model",
            str(tmp_path / "no-topk"),
            "--slide-size",
            "1024x768",
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "slide heatmap skipped" in printed and "no-encoder" in printed
    assert "TopK skipped" in printed
    with Image.open(out / "slide.png") as image:
        assert max(image.size) <= 1600
    with Image.open(out / "mammograms.png") as image:
        assert image.mode == "L"
    assert not (out / "heatmap.png").exists()


@pytest.mark.gui
def test_demo_under_a_virtual_display_saves_viewer_screenshots(tmp_path, capsys, monkeypatch):
    import os

    if "xvfb-run." not in os.environ.get("XAUTHORITY", "") or not os.environ.get("DISPLAY"):
        pytest.skip("needs to run under xvfb-run")
    monkeypatch.delenv("MEDVL_HEADLESS", raising=False)
    out = tmp_path / "demo"
    missing = ["--model", str(tmp_path / "none"), "--topk-model", str(tmp_path / "none")]
    assert demo_main(["--out", str(out), "--slide-size", "1024x768", *missing]) == 0
    for name in ("viewer-1.png", "viewer-2.png"):
        with Image.open(out / name) as image:
            pixels = np.asarray(image)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 300
        assert pixels.std() > 10  # a rendered window, not a blank frame


@pytest.mark.gui
def test_demo_viewers_hold_the_overlays_and_reuse_the_demo_features(
    tmp_path, qtbot, medvl_cache, tiny_topk, wait_for_runner
):
    from medvl_engine.demo import build_scene
    from napari_medvl._demo_viewer import show_scene
    from napari_medvl._heatmap_widget import HeatmapWidget
    from napari_medvl._topk_widget import TopKWidget

    scene = build_scene(tmp_path, "tumor", "medvl-demo", str(tiny_topk), 4, (1024, 768))
    assert scene.notes == []
    slide_viewer, mammo_viewer = show_scene(scene, run=False)
    try:
        names = [layer.name for layer in slide_viewer.layers]
        assert names == ["synthetic H&E", "heatmap: tumor", "top patches: tumor"]
        assert "TopK L boxes CC" in mammo_viewer.layers and "L MLO" in mammo_viewer.layers
        parts = {  # drawn as the TopK dock draws them: rims, boxes and labels in one layer
            part
            for view in ("CC", "MLO")
            for part in mammo_viewer.layers[f"TopK L boxes {view}"].features["part"]
        }
        assert parts == {"rim", "box", "label"}
        widget = next(
            w for w in slide_viewer.window.dock_widgets.values() if isinstance(w, HeatmapWidget)
        )
        topk = next(
            w for w in mammo_viewer.window.dock_widgets.values() if isinstance(w, TopKWidget)
        )
        # each viewer opens with the legend of its demo map on screen, saying what made it
        assert widget.colorbar.showing and "tumor" in widget.colorbar.title.text()
        details = widget.colorbar.details.text()
        assert "model: medvl-demo" in details and "not for diagnosis" in details
        importance = mammo_viewer.layers["TopK L importance CC"]
        assert topk.colorbar.showing and topk.colorbar.colormap == importance.metadata["colormap"]
        assert f"model: {tiny_topk}" in topk.colorbar.details.text()
        # the dock shows the K the scene ran at, beside the K the model was evaluated at
        assert (
            topk.k.value == 4 and topk.k_note.value == "evaluated at K = 3; K = 4 departs from it"
        )
        widget.prompts.value = "stroma"
        assert widget.run() is not None
        wait_for_runner(qtbot, widget.runner)
        assert widget.last_outcome is not None and not widget.last_outcome.extracted
        assert "heatmap: stroma" in slide_viewer.layers
        assert "stroma" in widget.colorbar.title.text()
        widget.mode.value, widget.prompts.value = "contrast", "tumor; stroma"
        assert widget.run() is not None  # a second overlay: one per slide and mode
        wait_for_runner(qtbot, widget.runner)
        qtbot.waitUntil(lambda: "contrast" in widget.colorbar.title.text(), timeout=10000)
        # the bar follows the map the user selects
        slide_viewer.layers.selection.active = slide_viewer.layers["heatmap: stroma"]
        assert widget.colorbar.title.text().startswith("stroma")
        assert "contrast" not in widget.colorbar.title.text()
    finally:
        for viewer in (slide_viewer, mammo_viewer):
            viewer.close()


def test_viewer_demo_headless_with_default_slide_size(tmp_path, capsys):
    out = tmp_path / "demo"
    missing = ["--model", str(tmp_path / "none"), "--topk-model", str(tmp_path / "none")]
    assert demo_main(["--out", str(out), "--headless", *missing]) == 0
    assert (out / "inputs" / "synthetic-he-3072x2048.tiff").is_file()
    with Image.open(out / "slide.png") as image:
        assert image.size == (1600, 1067)  # the 3072 x 2048 slide, longest side 1600
    assert "slide heatmap skipped" in capsys.readouterr().out
