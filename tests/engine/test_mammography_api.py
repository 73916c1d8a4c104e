"""One TopK-Patch path: the evaluation (``collect_outputs`` and the readout table of
``medvl-train topksiglip eval``), ``medvl topk``, the plugin's TopK job and the demo give the
same scores, boxes and zero-shot readouts on the same breasts, to the last bit, at the model's
own image side and its evaluated K; and that path is the model run by hand."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from medvl_engine.cli.main import main
from medvl_engine.data.mammo_dataset import MammoDataset
from medvl_engine.data.mammo_manifest import MammoRecord
from medvl_engine.data.mammo_reports import normalise_findings, parsed_report
from medvl_engine.demo import DEMO_SEED
from medvl_engine.demo_models import DEMO_NOTICE, shipped_model_dir
from medvl_engine.errors import ConfigError, ModelNotFoundError
from medvl_engine.io.mammo import PairMismatchError, breast_image, open_mammogram
from medvl_engine.mammography import BreastTopK, evaluated_k, open_views, resolve_k, topk
from medvl_engine.models.topksiglip_folder import load_topksiglip
from medvl_engine.models.topksiglip_inference import predict_topk, score_breasts
from medvl_engine.synthetic import make_mammogram_case
from medvl_engine.tasks.topksiglip.evaluation import collect_outputs, model_readouts

torch.set_num_threads(1)
VIEW_SHAPE = (400, 280)  # rows, cols of each planted view
VIEWS = ("CC", "MLO")
DEMO = "topksiglip-demo"


def _planted_view(path, lesion_xy, seed):
    """A fatty breast (grey half-ellipse on black) with one saturated disc."""
    rng = np.random.default_rng(seed)
    h, w = VIEW_SHAPE
    yy, xx = np.mgrid[:h, :w]
    breast = (xx / 230.0) ** 2 + ((yy - 200) / 180.0) ** 2 < 1
    image = np.where(breast, 0.35 + 0.05 * rng.standard_normal((h, w)), 0.0)
    x, y = lesion_xy
    image[(xx - x) ** 2 + (yy - y) ** 2 < 14**2] = 1.0
    Image.fromarray((image.clip(0, 1) * 255).astype(np.uint8)).save(path)


@pytest.fixture(scope="module")
def breasts(tmp_path_factory):
    """Two left breasts as (CC, MLO) PNG paths, each with a bright disc somewhere else."""
    folder = tmp_path_factory.mktemp("breasts")
    pairs = []
    for index, lesion in enumerate([(120, 150), (180, 230)]):
        cc, mlo = folder / f"case{index}_L_CC.png", folder / f"case{index}_L_MLO.png"
        _planted_view(cc, lesion, 2 * index)
        _planted_view(mlo, (lesion[0] - 20, lesion[1] + 20), 2 * index + 1)
        pairs.append((cc, mlo))
    return pairs


@pytest.fixture(scope="module")
def demo_records(tmp_path_factory):
    """The demo's own breast (seed DEMO_SEED, left, as ``make demo`` paints it: a BI-RADS 5
    cancer) and two smaller synthetic breasts, as the records an evaluation reads."""
    folder = tmp_path_factory.mktemp("demo-breasts")
    cases = [
        make_mammogram_case(folder / "demo", seed=DEMO_SEED, laterality="L"),
        make_mammogram_case(folder / "b", seed=12, laterality="R", size=(320, 224)),
        make_mammogram_case(folder / "c", seed=13, laterality="L", size=(320, 224)),
    ]
    records = []
    for case in cases:
        findings = normalise_findings(list(case.findings))
        records.append(
            MammoRecord(
                exam_id=str(case.exam_id),
                laterality=case.laterality,
                cc_path=case.cc_path,
                mlo_path=case.mlo_path,
                birads=int(case.birads),
                density=str(case.density),
                cancer=bool(case.cancer),
                findings=findings,
                report=parsed_report(findings, case.density, case.birads, case.cancer),
                roi_boxes={
                    v: [list(map(float, b)) for b in items] for v, items in case.boxes.items()
                },
                split="test",
            )
        )
    return records


def _rows(result):
    """Per-view rows (rank, score, box) of a TopKResult."""
    return {
        view: [
            (int(rank), float(score), [float(v) for v in box])
            for rank, score, box in zip(
                result.ranks[view], result.scores[view], result.boxes[view], strict=True
            )
        ]
        for view in VIEWS
    }


def _geojson_rows(document):
    rows = {view: [] for view in VIEWS}
    for feature in document["features"]:
        ring = np.array(feature["geometry"]["coordinates"][0])
        box = [ring[:, 0].min(), ring[:, 1].min(), ring[:, 0].max(), ring[:, 1].max()]
        properties = feature["properties"]
        rows[properties["view"]].append((properties["rank"], properties["score"], box))
    return rows


def _job(cc, mlo, model, k=None):
    from napari_medvl._topk_job import TopKRequest, topk_job

    request = TopKRequest(open_mammogram(cc), open_mammogram(mlo), model, k)
    jobs = topk_job(request, {})
    while True:
        try:
            next(jobs)
        except StopIteration as stop:
            return stop.value


def _assert_same(a, b):
    for view in VIEWS:
        assert [rank for rank, _, _ in a[view]] == [rank for rank, _, _ in b[view]]
        for (_, score_a, box_a), (_, score_b, box_b) in zip(a[view], b[view], strict=True):
            assert score_a == score_b
            np.testing.assert_array_equal(box_a, box_b)


def test_evaluation_cli_and_dock_give_the_same_numbers_on_the_demo_breasts(
    tmp_path, demo_records, capsys, monkeypatch
):
    # the dock's job in this process's threads (its model process has its own test,
    # tests/plugin/test_topk_worker_process.py): the same torch threads as the evaluation
    monkeypatch.setenv("MEDVL_MODEL_PROCESS", "0")
    model = load_topksiglip(DEMO)
    k = evaluated_k(DEMO)
    assert k == model.config.k == 4  # the demo recipe evaluates at its training K
    dataset = MammoDataset(demo_records, model.geometry)
    outputs = collect_outputs(model, dataset, k=k, batch_size=3)  # three breasts in one read
    table, _ = model_readouts(model, dataset, k=k)  # what medvl-train topksiglip eval reads
    assert outputs.k == k and outputs.selected.shape == (3, k)
    for index, record in enumerate(demo_records):
        outcome = _job(record.cc_path, record.mlo_path, DEMO)  # the dock: K not given
        dock = outcome.result
        assert (dock.k, dock.evaluated_k, dock.image_size) == (k, k, model.config.image_size)
        assert outcome.breast.image.shape == (256, 256)  # the model's side, as evaluated
        assert outcome.run.result is dock and outcome.run.k_is_evaluated

        # the evaluation: the same selection, importance map, embedding and readouts
        np.testing.assert_array_equal(dock.importance, outputs.importance[index])
        np.testing.assert_array_equal(
            dock.breast_boxes, model.geometry.boxes(outputs.selected[index])
        )
        np.testing.assert_array_equal(
            dock.breast_scores, outputs.importance[index].reshape(-1)[outputs.selected[index]]
        )
        np.testing.assert_array_equal(dock.embedding, outputs.embeddings[index].numpy())
        for task, classes in dock.zero_shot.items():
            assert list(classes.values()) == outputs.zero_shot[task][index].tolist()
        assert table.scores["auroc_cancer"][index] == dock.zero_shot["cancer"]["positive"]
        assert table.scores["auroc_birads_5"][index] == dock.zero_shot["birads"]["5"]

        # medvl topk without --k: the same boxes, scores and readouts, read back from its files
        geojson, table_csv = tmp_path / f"{index}.geojson", tmp_path / f"{index}.csv"
        argv = ["topk", str(record.cc_path), str(record.mlo_path), "--model", DEMO]
        assert main([*argv, "--out", str(geojson), "--out", str(table_csv)]) == 0
        printed = capsys.readouterr().out
        assert "K = 4 (the K the model was evaluated at); breast image 256 x 256 px" in printed
        document = json.loads(geojson.read_text())
        _assert_same(_geojson_rows(document), _rows(dock))
        assert document["medvl"]["zero_shot"] == dock.zero_shot
        assert (document["medvl"]["k"], document["medvl"]["evaluated_k"]) == (k, k)
        with open(table_csv, newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert float(rows[0]["p_cancer_positive"]) == dock.zero_shot["cancer"]["positive"]
        assert float(rows[0]["p_birads_5"]) == dock.zero_shot["birads"]["5"]
        assert {(r["k"], r["evaluated_k"], r["model"], r["notice"]) for r in rows} == {
            ("4", "4", DEMO, DEMO_NOTICE)
        }
    # the demo's own breast: a cancer; the reading printed for it is the evaluation's
    assert demo_records[0].cancer and demo_records[0].birads == 5


def test_scoring_a_batch_is_scoring_each_breast(demo_records):
    model = load_topksiglip(DEMO)
    images = np.stack(
        [
            breast_image(*open_views(r.cc_path, r.mlo_path), size=(256, 128)).image
            for r in demo_records
        ]
    )
    together = score_breasts(model, images, k=4)
    for row in range(len(images)):
        alone = score_breasts(model, images[row : row + 1], k=4)
        assert torch.equal(together.embedding[row : row + 1], alone.embedding)
        np.testing.assert_array_equal(together.importance[row], alone.importance[0])
        assert together.readouts(row) == alone.readouts(0)
    with pytest.raises(ValueError, match=r"\[B, 256, 256\]"):
        score_breasts(model, np.zeros((1, 512, 512), np.float32))


def _demo_copy(tmp_path, recipe):
    folder = tmp_path / "model"
    shutil.copytree(shipped_model_dir(DEMO), folder)
    values = json.loads((folder / "config.json").read_text())
    values["recipe"] = recipe
    (folder / "config.json").write_text(json.dumps(values))
    return folder


def test_the_evaluated_k_is_the_recipes_eval_k_when_it_records_one(tmp_path, breasts, capsys):
    flat = _demo_copy(tmp_path / "flat", {"task": {"k": 4, "eval_k": 6}})
    assert evaluated_k(flat) == 6 and evaluated_k(str(flat)) == 6
    by_sections = _demo_copy(tmp_path / "sections", {"task": {"eval": {"eval_k": 5}}})
    assert evaluated_k(by_sections) == 5
    assert evaluated_k(_demo_copy(tmp_path / "none", {"task": {"eval_k": None}})) == 4
    assert evaluated_k(load_topksiglip(DEMO)) == 4  # a loaded model alone: its config k
    cc, mlo = breasts[0]
    out = tmp_path / "t.geojson"
    assert main(["topk", str(cc), str(mlo), "--model", str(flat), "--out", str(out)]) == 0
    assert "K = 6 (the K the model was evaluated at)" in capsys.readouterr().out
    argv = ["topk", str(cc), str(mlo), "--model", str(flat), "--k", "3", "--out", str(out)]
    assert main(argv) == 0
    assert "K = 3 (the model was evaluated at K = 6;" in capsys.readouterr().out
    assert json.loads(out.read_text())["medvl"]["k_is_evaluated"] is False
    broken = _demo_copy(tmp_path / "broken", {"task": {"eval_k": 65}})
    with pytest.raises(ModelNotFoundError, match=r"records the evaluated K 65, which is not"):
        evaluated_k(broken)


def test_the_engine_call_is_the_model_run_by_hand(breasts):
    cc, mlo = (open_mammogram(path) for path in breasts[0])
    model = load_topksiglip(DEMO)
    side = model.config.image_size
    by_hand_breast = breast_image(cc, mlo, size=(side, side // 2))
    by_hand = predict_topk(model, by_hand_breast, k=int(model.config.k))
    engine = topk(cc, mlo, model)  # K: the model's own
    assert isinstance(engine, BreastTopK) and engine.k == model.config.k and engine.model is model
    assert engine.k_is_evaluated and engine.image_size == side
    assert engine.cc is cc and engine.mlo is mlo  # opened views pass through
    np.testing.assert_array_equal(engine.breast.image, by_hand_breast.image)
    _assert_same(_rows(engine.result), _rows(by_hand))
    np.testing.assert_array_equal(engine.result.embedding, by_hand.embedding)
    assert engine.boxes is engine.result.boxes and engine.scores is engine.result.scores


def test_k_outside_the_candidates_is_one_sentence_naming_the_model(breasts):
    model = load_topksiglip(DEMO)  # an 8 x 8 grid: 64 candidates
    assert resolve_k(model, None) == model.config.k and resolve_k(model, 64) == 64
    assert resolve_k(model, None, DEMO) == evaluated_k(DEMO)
    with pytest.raises(ConfigError) as raised:
        resolve_k(model, 65, DEMO)
    assert str(raised.value) == (
        "K = 65 is not possible with TopK model topksiglip-demo: it exceeds the 64 candidate "
        "patches; choose 1 to 64."
    )
    with pytest.raises(ConfigError, match=r"^K = 0 is not possible with this TopK model: choose"):
        topk(*breasts[0], model, k=0)


def test_a_wrong_pair_is_refused_before_the_model_folder_is_read(tmp_path, breasts):
    other = tmp_path / "other_R_MLO.png"
    _planted_view(other, (100, 200), 9)
    with pytest.raises(PairMismatchError):
        topk(breasts[0][0], other, str(tmp_path / "no-model-here"))
    cc, mlo = open_views(*breasts[0], voi_index=0)
    assert open_views(cc, mlo) == (cc, mlo)
