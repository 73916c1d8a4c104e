"""`medvl demo` on a fresh install: shipped models only (empty cache, no network, no training),
every overlay file written and read back, each naming its demo model and the notice.

How long the demo takes is measured by `bench/bench_demo.py` (23.2 s wall, 15.4 s CPU on 2
lightly loaded cores), not asserted here: the 600 s timeout below only guards against a hang.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from medvl_engine.demo_models import DEMO_NOTICE, shipped_model_dir

MEDVL = Path(sys.executable).with_name("medvl")
SLIDE_OUTPUTS = ("heatmap.png", "heatmap.geojson", "top_patches.csv", "heatmap.tiff")
TOPK_OUTPUTS = ("topk.png", "topk.geojson", "topk.csv")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, float]:
    for name in ("medvl-demo", "topksiglip-demo"):
        assert shipped_model_dir(name) is not None, f"{name} is not shipped; run make demo-models"
    if not MEDVL.exists():
        pytest.skip(f"the medvl command is not installed beside {sys.executable}")
    root = tmp_path_factory.mktemp("fresh")
    cache = root / "empty-cache"
    cache.mkdir()
    env = {
        **os.environ,
        "MEDVL_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(root / "hf-home"),
        "MEDVL_HEADLESS": "1",
    }
    out = root / "demo-output"
    started = time.perf_counter()
    completed = subprocess.run(
        [MEDVL, "demo", "--out", str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    wall = time.perf_counter() - started
    assert completed.returncode == 0, completed.stderr
    assert not any(cache.iterdir()), "the demo wrote into the model cache (trained or fitted)"
    return out, completed, wall


def test_demo_writes_every_overlay_and_reads_back(demo_run):
    out, completed, _ = demo_run
    printed = completed.stdout
    for name in SLIDE_OUTPUTS + TOPK_OUTPUTS:
        assert str(out / name) in printed
    assert "skipped" not in printed  # both shipped models loaded
    with Image.open(out / "heatmap.png") as image:
        assert image.size[0] > 1000 and image.mode == "RGB"
        assert image.text["medvl:model"] == "medvl-demo"
        assert image.text["medvl:notice"] == DEMO_NOTICE
    collection = json.loads((out / "heatmap.geojson").read_text())
    tiles = [f for f in collection["features"] if f["properties"]["objectType"] == "detection"]
    assert len(tiles) > 50
    assert collection["medvl"]["notice"] == DEMO_NOTICE
    assert all(f["properties"]["notice"] == DEMO_NOTICE for f in collection["features"])
    with open(out / "top_patches.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 10 and {r["notice"] for r in rows} == {DEMO_NOTICE}
    import tifffile

    with tifffile.TiffFile(out / "heatmap.tiff") as tif:
        description = json.loads(tif.pages[0].description)
        shape = tif.pages[0].shape
    d = description["downsample"]
    assert shape == (-(-2048 // d), -(-3072 // d), 4)  # RGBA over the whole 3072 x 2048 slide
    assert description["model"] == "medvl-demo" and description["notice"] == DEMO_NOTICE
    with Image.open(out / "topk.png") as image:
        assert image.size[0] > 500 and image.text["medvl:notice"] == DEMO_NOTICE
    topk = json.loads((out / "topk.geojson").read_text())
    assert topk["medvl"]["model"] == "topksiglip-demo"
    shipped_k = json.loads((shipped_model_dir("topksiglip-demo") / "config.json").read_text())["k"]
    assert len(topk["features"]) == shipped_k  # the demo reads at the model's own K
    assert all(f["properties"]["notice"] == DEMO_NOTICE for f in topk["features"])
    with open(out / "topk.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == shipped_k and {r["model"] for r in rows} == {"topksiglip-demo"}
    assert not list(out.glob(".*"))  # no temporaries left behind


def test_demo_says_what_its_models_are_and_how_long_each_stage_took(demo_run):
    _, completed, _ = demo_run
    printed = completed.stdout
    assert f"medvl-demo: {DEMO_NOTICE}" in printed
    assert f"topksiglip-demo: {DEMO_NOTICE}" in printed
    timings = [line for line in printed.splitlines() if "timings:" in line]
    assert len(timings) == 1
    for stage in ("synthetic slide", "load encoder", "features", "TopK", "slide exports"):
        assert f"{stage} " in timings[0]


def test_the_demo_reads_its_breast_at_the_models_side_and_evaluated_k(demo_run):
    """The demo's breast (a BI-RADS 5 cancer; tests/engine/test_mammography_api.py runs the
    same breast through the evaluation, `medvl topk` and the dock) is read at the model's
    own side and evaluated K, and every TopK file carries the readouts printed."""
    out, completed, _ = demo_run
    document = json.loads((out / "topk.geojson").read_text())
    medvl = document["medvl"]
    assert (medvl["k"], medvl["evaluated_k"], medvl["image_size"]) == (4, 4, 256)
    p_cancer = medvl["zero_shot"]["cancer"]["positive"]
    with open(out / "topk.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {float(row["p_cancer_positive"]) for row in rows} == {p_cancer}
    assert {(row["k"], row["evaluated_k"], row["image_size"]) for row in rows} == {
        ("4", "4", "256")
    }
    with Image.open(out / "topk.png") as image:
        assert json.loads(image.text["medvl:zero_shot"]) == medvl["zero_shot"]
        assert image.size[0] == 768  # the 256 px image the model scored, enlarged 3 times
    assert (
        "topksiglip-demo: K = 4 (the K the model was evaluated at), breast image 256 x 256 px, "
        f"zero-shot p(cancer) = {p_cancer:.3f}"
    ) in completed.stdout


def test_demo_stderr_holds_no_library_noise(demo_run):
    _, completed, _ = demo_run
    assert completed.stderr.strip() == ""


def test_missing_shipped_models_are_notes_naming_the_rebuild_never_a_training_run(
    tmp_path, monkeypatch
):
    from medvl_engine import demo_models
    from medvl_engine.demo import build_scene

    empty = tmp_path / "no-shipped-models"
    empty.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(demo_models, "SHIPPED_ROOT", empty)
    monkeypatch.setenv("MEDVL_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    scene = build_scene(
        tmp_path / "out", "tumor", "medvl-demo", "topksiglip-demo", 4, slide_size=(512, 512)
    )
    assert time.perf_counter() - started < 60  # no training run hides behind a missing model
    assert scene.heatmap is None and scene.topk is None
    assert len(scene.notes) == 2
    assert all("make demo-models" in note for note in scene.notes), scene.notes
    assert not any(cache.iterdir())


def test_demo_reads_at_the_models_own_k_and_refuses_an_impossible_k(
    tmp_path, monkeypatch, tiny_topk_folder
):
    from medvl_engine.demo import build_scene

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tiny = str(tiny_topk_folder(tmp_path))  # trained and evaluated with K = 3 on an 8 x 8 grid
    missing = str(tmp_path / "no-encoder")
    scene = build_scene(tmp_path / "a", "tumor", missing, tiny, None, slide_size=(512, 512))
    assert scene.topk is not None
    assert sum(len(scene.topk.ranks[view]) for view in ("CC", "MLO")) == 3
    scene = build_scene(tmp_path / "b", "tumor", missing, tiny, 65, slide_size=(512, 512))
    assert scene.topk is None
    assert any("K = 65 is not possible" in note and "1 to 64" in note for note in scene.notes)
