"""`medvl topk`: boxes in each view's source px, on a planted bright lesion; outputs; errors."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from medvl_engine.cli.main import main
from medvl_engine.models.topksiglip_folder import save_topksiglip

torch.set_num_threads(1)
VIEW_SHAPE = (400, 280)  # rows, cols of each planted view
LESION_RADIUS = 14


def _planted_view(path, lesion_xy, seed):
    """A fatty breast (gray half-ellipse on black) with one saturated disc; returns its box."""
    rng = np.random.default_rng(seed)
    h, w = VIEW_SHAPE
    yy, xx = np.mgrid[:h, :w]
    breast = (xx / 230.0) ** 2 + ((yy - 200) / 180.0) ** 2 < 1
    image = np.where(breast, 0.35 + 0.05 * rng.standard_normal((h, w)), 0.0)
    x, y = lesion_xy
    image[(xx - x) ** 2 + (yy - y) ** 2 < LESION_RADIUS**2] = 1.0
    Image.fromarray((image.clip(0, 1) * 255).astype(np.uint8)).save(path)
    r = LESION_RADIUS
    return [x - r, y - r, x + r, y + r]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, make_brightness_scorer, tiny_topk_model):
    folder = tmp_path_factory.mktemp("topk-model")
    model = make_brightness_scorer(tiny_topk_model(folder))
    return save_topksiglip(model, folder / "model")


def _overlap(a, b):
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


@pytest.mark.parametrize("lesion", [(120, 150), (180, 210)])
def test_top_box_lands_on_planted_lesion(tmp_path, model_dir, lesion, capsys):
    lx, ly = lesion
    cc, mlo = tmp_path / "case_L_CC.png", tmp_path / "case_L_MLO.png"
    lesion_boxes = {
        "CC": _planted_view(cc, (lx, ly), 0),
        "MLO": _planted_view(mlo, (lx - 20, ly + 20), 1),
    }
    out = tmp_path / "topk.geojson"
    table = tmp_path / "topk.csv"
    png = tmp_path / "topk.png"
    code = main(
        [
            "topk",
            str(cc),
            str(mlo),
            "--model",
            str(model_dir),
            "--k",
            "3",
            "--out",
            str(out),
            "--out",
            str(table),
            "--out",
            str(png),
        ]
    )
    assert code == 0
    document = json.loads(out.read_text())
    features = document["features"]
    assert [f["properties"]["rank"] for f in features] == [1, 2, 3]
    h, w = VIEW_SHAPE
    for feature in features:
        ring = np.array(feature["geometry"]["coordinates"][0])
        assert ring[:, 0].min() >= -1 and ring[:, 0].max() <= w + 1
        assert ring[:, 1].min() >= -1 and ring[:, 1].max() <= h + 1
        assert feature["properties"]["view"] in ("CC", "MLO")
        assert 0 < feature["properties"]["score"] <= 1
    top = features[0]
    ring = np.array(top["geometry"]["coordinates"][0])
    box = [ring[:, 0].min(), ring[:, 1].min(), ring[:, 0].max(), ring[:, 1].max()]
    assert _overlap(box, lesion_boxes[top["properties"]["view"]]) > 0
    importance = np.array(document["medvl"]["importance"])
    assert importance.shape == (8, 8) and importance.sum() == pytest.approx(1.0, abs=1e-4)
    rows = list(csv.DictReader(table.open()))
    assert [int(r["rank"]) for r in rows] == [1, 2, 3]
    assert float(rows[0]["x0"]) == pytest.approx(box[0], abs=0.01)
    np.testing.assert_allclose(np.load(tmp_path / "topk_importance.npy"), importance, atol=1e-6)
    with Image.open(png) as image:
        # the 256 px image the model scored, enlarged 3 times; the footer names the model and K
        assert image.size[0] == 768 and 768 < image.size[1] <= 840
        assert json.loads(image.text["medvl:k"]) == 3
        assert image.text["medvl:model"] == model_dir.name
        assert np.asarray(image)[..., 0].max() > 200  # red heat over the lesion
    assert "wrote" in capsys.readouterr().out
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_bad_inputs_exit_2_with_one_sentence(tmp_path, model_dir, capsys):
    cc = tmp_path / "a_L_CC.png"
    mlo = tmp_path / "a_L_MLO.png"
    _planted_view(cc, (100, 100), 0)
    _planted_view(mlo, (100, 100), 1)
    assert main(["topk", str(cc), str(mlo), "--model", str(model_dir), "--out", "x.txt"]) == 2
    assert "unsupported extension" in capsys.readouterr().err
    assert (
        main(
            [
                "topk",
                str(cc),
                str(mlo),
                "--model",
                str(tmp_path / "none"),
                "--out",
                str(tmp_path / "a.csv"),
            ]
        )
        == 2
    )
    assert "was not found" in capsys.readouterr().err
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 20)
    assert (
        main(
            [
                "topk",
                str(broken),
                str(mlo),
                "--model",
                str(model_dir),
                "--out",
                str(tmp_path / "b.csv"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("medvl: error:") and "broken.png" in err and err.count("\n") == 1
    assert (
        main(
            [
                "topk",
                str(cc),
                str(mlo),
                "--model",
                str(model_dir),
                "--k",
                "65",
                "--out",
                str(tmp_path / "c.csv"),
            ]
        )
        == 2
    )
    assert "exceeds" in capsys.readouterr().err
    assert not (tmp_path / "b.csv").exists() and not (tmp_path / "c.csv").exists()
    sentences = {  # each refused before any model loads, in one sentence
        (str(cc), str(mlo)): "nothing to write: give --out FILE (repeatable) or --dicom-dir DIR.",
        (str(cc), "--out", "d.csv"): "give the MLO view after the CC view, or one study as",
        (str(cc), str(mlo), "--breast", "L", "--out", "e.csv"): "--breast chooses the breast",
    }
    for argv, sentence in sentences.items():
        assert main(["topk", *argv, "--model", str(tmp_path / "none")]) == 2
        err = capsys.readouterr().err
        assert sentence in err and err.count("\n") == 1, err


def test_every_box_stays_inside_its_view_and_files_name_views_without_folders(
    tmp_path, model_dir, capsys
):
    """All 64 candidates (the padding beside each breast included) land inside the source
    view's pixels, and the CSV / GeoJSON name each view by its file name only."""
    folder = tmp_path / "patient-0042-smith"
    folder.mkdir()
    cc, mlo = folder / "case_L_CC.png", folder / "case_L_MLO.png"
    _planted_view(cc, (120, 150), 0)
    _planted_view(mlo, (100, 230), 1)
    table, document_path = tmp_path / "all.csv", tmp_path / "all.geojson"
    argv = ["topk", str(cc), str(mlo), "--model", str(model_dir), "--k", "64"]
    assert main([*argv, "--out", str(table), "--out", str(document_path)]) == 0
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 64
    h, w = VIEW_SHAPE
    for row in rows:
        x0, y0, x1, y1 = (float(row[key]) for key in ("x0", "y0", "x1", "y1"))
        assert 0 <= x0 <= x1 <= w and 0 <= y0 <= y1 <= h, row
        assert row["image"] == f"case_L_{row['view']}.png"
    text = table.read_text() + document_path.read_text()
    assert "patient-0042-smith" not in text and str(tmp_path) not in text
    images = {f["properties"]["image"] for f in json.loads(document_path.read_text())["features"]}
    assert images == {"case_L_CC.png", "case_L_MLO.png"}


def test_an_output_that_is_an_input_view_is_refused_before_the_model_loads(
    tmp_path, model_dir, capsys
):
    cc, mlo = tmp_path / "b_L_CC.png", tmp_path / "b_L_MLO.png"
    _planted_view(cc, (120, 150), 0)
    _planted_view(mlo, (100, 230), 1)
    before = cc.read_bytes()
    argv = ["topk", str(cc), str(mlo), "--model", str(tmp_path / "no-model-here")]
    assert main([*argv, "--out", str(cc)]) == 2
    err = capsys.readouterr().err
    assert "is the input b_L_CC.png" in err and err.count("\n") == 1  # not "model not found"
    assert cc.read_bytes() == before
    # the CSV's importance grid is written beside it: it may not replace an input either
    grid = tmp_path / "t_importance.npy"
    np.save(grid, np.zeros(3))
    assert main(["topk", str(grid), str(mlo), "--out", str(tmp_path / "t.csv")]) == 2
    assert "is the input t_importance.npy" in capsys.readouterr().err


def test_a_blank_view_is_said_before_the_result(tmp_path, model_dir, capsys):
    cc, mlo = tmp_path / "c_L_CC.png", tmp_path / "c_L_MLO.png"
    Image.fromarray(np.full(VIEW_SHAPE, 90, np.uint8)).save(cc)
    _planted_view(mlo, (100, 230), 1)
    argv = ["topk", str(cc), str(mlo), "--model", str(model_dir), "--k", "3"]
    code = main([*argv, "--out", str(tmp_path / "t.csv")])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "medvl: note: c_L_CC.png: every pixel stores the same value (90), so the image shows "
        "one grey; check that this is the view meant."
    )
    assert code == 0 and len(err) == 1  # the result is still written; only the blank view is named
