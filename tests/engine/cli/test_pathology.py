"""`medvl features`, `medvl heatmap`, `medvl classify` end to end on synthetic slides."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from medvl_engine.cli.main import main


@pytest.fixture(scope="module")
def slide_path(tmp_path_factory, demo_encoder):
    from medvl_engine.synthetic import make_synthetic_slide

    demo_encoder()  # builds the demo model once, in the test cache
    folder = tmp_path_factory.mktemp("cli")
    truth = make_synthetic_slide(
        folder / "case.tiff", seed=3, size=(2048, 2048), classes=("tumor", "stroma", "adipose")
    )
    return truth.path


def test_heatmap_writes_every_requested_file(slide_path, tmp_path, capsys):
    outputs = [tmp_path / name for name in ("h.geojson", "h.npz", "h.png", "h.csv")]
    argv = ["heatmap", str(slide_path), "--prompt", "tumor", "--top", "3"]
    for out in outputs:
        argv += ["--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out) for out in outputs]
    document = json.loads(outputs[0].read_text())
    assert document["type"] == "FeatureCollection"
    names = {f["properties"]["classification"]["name"] for f in document["features"]}
    tiles = names - {"top patch"}
    assert "top patch" in names and all(name.startswith("tumor: score ") for name in tiles)
    with np.load(outputs[1]) as data:
        assert data["scores"].shape == (len(data["coords"]),) and str(data["prompt"]) == "tumor"
    assert outputs[2].read_bytes()[:4] == b"\x89PNG"
    header = outputs[3].read_text().splitlines()[0]
    assert header == "rank,x0,y0,x1,y1,score,prompt,model,notice"


def test_heatmap_from_an_existing_store_and_classify(slide_path, tmp_path, capsys):
    assert main(["features", str(slide_path), "--out", str(tmp_path)]) == 0
    (store,) = tmp_path.glob("case-*.zarr")  # named by the slide and its content fingerprint
    capsys.readouterr()
    assert (
        main(
            [
                "heatmap",
                str(slide_path),
                "--features",
                str(store),
                "--prompt",
                "tumor",
                "--prompt",
                "adipose tissue",
                "--mode",
                "contrast",
                "--out",
                str(tmp_path / "c.npz"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "c.npz") as data:
        assert str(data["mode"]) == "contrast" and str(data["prompt"]) == "tumor - adipose tissue"
    capsys.readouterr()
    assert (
        main(
            [
                "classify",
                str(slide_path),
                "--features",
                str(store),
                "--json",
                "--classes",
                "tumor",
                "necrosis",
                "lymphocytes",
            ]
        )
        == 0
    )
    ranked = json.loads(capsys.readouterr().out)
    assert [r["class"] for r in ranked][0] == "tumor"
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)


def test_features_shards_split_a_cohort(slide_path, tmp_path, capsys):
    from medvl_engine.synthetic import make_synthetic_slide

    slides = [
        str(make_synthetic_slide(tmp_path / name, seed=seed, size=(512, 512)).path)
        for seed, name in enumerate(("c.tiff", "a.tiff", "b.tiff"))
    ]
    out = tmp_path / "stores"
    small = ["--patch-size", "64", "--min-tissue", "0.1"]
    assert main(["features", *slides, "--out", str(out), "--shard", "1/2", *small]) == 0
    assert sorted(p.name.split("-")[0] for p in out.iterdir()) == ["b"]
    assert main(["features", *slides, "--out", str(out), "--shard", "0/2", *small]) == 0
    assert sorted(p.name.split("-")[0] for p in out.iterdir()) == ["a", "b", "c"]


def test_features_reports_a_damaged_slide_and_still_encodes_the_others(tmp_path, capsys):
    from medvl_engine.synthetic import make_synthetic_slide

    good = make_synthetic_slide(tmp_path / "good.tiff", seed=1, size=(512, 512)).path
    damaged = tmp_path / "damaged.svs"
    damaged.write_bytes(good.read_bytes()[:200])
    out = tmp_path / "stores"
    argv = ["features", str(damaged), str(good), "--out", str(out), "--patch-size", "64"]
    assert main([*argv, "--min-tissue", "0.1"]) == 2
    err_lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err_lines) == 1 and err_lines[0].startswith("medvl: error: damaged.svs:")
    assert [p.name.split("-")[0] for p in out.glob("*.zarr")] == ["good"]


def test_features_imports_trident_h5(tmp_path, capsys):
    h5_path = tmp_path / "slide1.h5"
    with h5py.File(h5_path, "w") as handle:
        handle["features"] = np.eye(3, 8, dtype=np.float32)
        handle["coords"] = np.array([[0, 0], [256, 0], [512, 0]])
        handle["coords"].attrs["patch_size_level0"] = 256
    assert main(["features", "--from-h5", str(h5_path), "--out", str(tmp_path / "s")]) == 0
    assert "3 patches x 8 (imported)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["heatmap", "{slide}", "--prompt", "t", "--out", "{tmp}/x.bmp"], "unknown type '.bmp'"),
        (["heatmap", "{tmp}/none.svs", "--prompt", "t", "--out", "{tmp}/x.png"], "none.svs"),
        (
            ["heatmap", "{slide}", "--prompt", "t", "--mode", "contrast", "--out", "{tmp}/x.npz"],
            "Contrast mode needs exactly two prompts (A minus B), got 1.",
        ),
        (["features", "{slide}", "--out", "{tmp}", "--shard", "3/2"], "--shard '3/2'"),
        (["classify", "{slide}", "--classes", "tumor"], "at least two class prompts"),
        (
            [
                "heatmap",
                "{slide}",
                "--prompt",
                "t",
                "--model",
                "no-such-model",
                "--out",
                "{tmp}/x.png",
            ],
            "no-such-model",
        ),
    ],
)
def test_bad_input_exits_2_with_one_sentence(slide_path, tmp_path, capsys, argv, message):
    argv = [a.format(slide=slide_path, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("medvl: error: ") and message in err[0]
    assert "Traceback" not in err[0]


def test_export_converts_a_saved_heatmap_without_a_model(slide_path, tmp_path, capsys):
    from medvl_engine.export import load_heatmap_npz

    saved = tmp_path / "h.npz"
    assert main(["heatmap", str(slide_path), "--prompt", "tumor", "--out", str(saved)]) == 0
    heatmap, layout = load_heatmap_npz(saved)
    assert layout.mpp == (0.5, 0.5) and layout.slide_dimensions == (2048, 2048)
    outputs = [tmp_path / "again.geojson", tmp_path / "again.tiff", tmp_path / "top.csv"]
    argv = ["export", str(saved), "--geojson-style", "contours", "--top", "2"]
    for out in outputs:
        argv += ["--out", str(out)]
    assert main(argv) == 0
    document = json.loads(outputs[0].read_text())
    kinds = {f["geometry"]["type"] for f in document["features"]}
    assert kinds == {"MultiPolygon", "Polygon"}  # contours + the two top boxes
    rows = outputs[2].read_text().splitlines()
    assert len(rows) == 3 and float(rows[1].split(",")[5]) == pytest.approx(heatmap.scores.max())
    from medvl_engine.io.slide import open_slide

    with open_slide(outputs[1]) as tiff:
        assert tiff.mpp is not None
    assert main(["export", str(tmp_path / "missing.npz"), "--out", str(tmp_path / "x.csv")]) == 2
    assert "missing.npz does not exist" in capsys.readouterr().err


def test_blank_slide_is_reported_not_scored(tmp_path, capsys):
    import tifffile

    blank = tmp_path / "blank.tiff"
    tifffile.imwrite(
        blank,
        np.full((512, 512, 3), 245, np.uint8),
        tile=(256, 256),
        photometric="rgb",
        resolution=(2e4, 2e4),
        resolutionunit="CENTIMETER",
    )
    assert main(["heatmap", str(blank), "--prompt", "t", "--out", str(tmp_path / "b.png")]) == 2
    assert "blank.tiff: no patch holds enough tissue" in capsys.readouterr().err
    assert not (tmp_path / "b.png").exists()


def test_exports_from_imported_h5_name_the_model_that_scored_them(slide_path, tmp_path, capsys):
    from medvl_engine.encoders import load_encoder

    dim = load_encoder("medvl-demo").embed_dim
    h5_path = tmp_path / "case.h5"
    cols, rows = np.meshgrid(np.arange(4) * 256, np.arange(3) * 256)
    with h5py.File(h5_path, "w") as handle:
        handle["features"] = np.random.default_rng(0).standard_normal((12, dim)).astype("f4")
        handle["coords"] = np.stack([cols.ravel(), rows.ravel()], axis=1)
        handle["coords"].attrs["patch_size_level0"] = 256
    table = tmp_path / "scores.csv"
    argv = ["heatmap", str(slide_path), "--features", str(h5_path), "--prompt", "tumor"]
    assert main([*argv, "--model", "medvl-demo", "--out", str(table)]) == 0
    import csv

    with open(table, newline="") as handle:
        rows_read = list(csv.DictReader(handle))
    assert len(rows_read) == 12
    assert {row["model"] for row in rows_read} == {"medvl-demo"}  # was "unknown"
    notices = {row["notice"] for row in rows_read}
    assert notices == {"demo model trained on synthetic data, not for diagnosis"}
