"""`mammography.topk` is the one TopK-Patch path: the CLI, the plugin's job and the demo give
the same scores, boxes and readouts as the engine call, and the engine call the same as the
model run by hand on the breast image (so nothing changed when the callers moved onto it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from medvl_engine.cli.main import main
from medvl_engine.errors import ConfigError
from medvl_engine.io.mammo import PairMismatchError, breast_image, open_mammogram
from medvl_engine.mammography import PAPER_VIEW_SIZE, BreastTopK, open_views, resolve_k, topk
from medvl_engine.models.topksiglip_folder import load_topksiglip, save_topksiglip
from medvl_engine.models.topksiglip_inference import predict_topk

torch.set_num_threads(1)
VIEW_SHAPE = (400, 280)  # rows, cols of each planted view
VIEWS = ("CC", "MLO")


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
def paper_sized_model(tmp_path_factory, make_brightness_scorer, tiny_topk_model):
    """A tiny brightness-scoring model whose own side is the paper's 1536 px, so the CLI's
    breast image (the model's side) and the dock's (the paper's size) are the same image."""
    folder = tmp_path_factory.mktemp("paper-model")
    model = make_brightness_scorer(tiny_topk_model(folder, image_size=1536, low_res_factor=8))
    return str(save_topksiglip(model, folder / "model"))


def _cli(cc, mlo, model, k, out):
    """`medvl topk` -> (per-view rows (rank, score, box), zero-shot readouts) from its GeoJSON."""
    argv = ["topk", str(cc), str(mlo), "--model", model, "--k", str(k), "--out", str(out)]
    assert main(argv) == 0
    document = json.loads(out.read_text())
    rows = {view: [] for view in VIEWS}
    for feature in document["features"]:
        ring = np.array(feature["geometry"]["coordinates"][0])
        box = [ring[:, 0].min(), ring[:, 1].min(), ring[:, 0].max(), ring[:, 1].max()]
        properties = feature["properties"]
        rows[properties["view"]].append((properties["rank"], properties["score"], box))
    return rows, document["medvl"]["zero_shot"]


def _rows(result):
    """The same per-view rows from a TopKResult."""
    return {
        view: [
            (int(rank), float(score), [float(v) for v in box])
            for rank, score, box in zip(
                result.ranks[view], result.scores[view], result.boxes[view], strict=True
            )
        ]
        for view in VIEWS
    }


def _job(cc, mlo, model, k):
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


@pytest.mark.parametrize("model", ["topksiglip-demo", "paper"])
def test_cli_job_and_engine_call_agree_on_every_breast(tmp_path, breasts, model, paper_sized_model):
    name = paper_sized_model if model == "paper" else model
    k = 4
    for index, (cc, mlo) in enumerate(breasts):
        cli_rows, cli_readouts = _cli(cc, mlo, name, k, tmp_path / f"{index}.geojson")
        engine = topk(cc, mlo, name, k=k)  # the CLI's breast image: the model's own side
        assert isinstance(engine, BreastTopK) and engine.k == k
        _assert_same(cli_rows, _rows(engine.result))
        assert cli_readouts == engine.zero_shot and engine.zero_shot  # readouts come along

        outcome = _job(cc, mlo, name, k)  # the dock: the paper's 1536 x 1536 breast image
        docked = topk(cc, mlo, name, k=k, view_size=PAPER_VIEW_SIZE)
        _assert_same(_rows(outcome.result), _rows(docked.result))
        assert outcome.result.zero_shot == docked.zero_shot
        np.testing.assert_array_equal(outcome.breast.image, docked.breast.image)
        np.testing.assert_array_equal(outcome.result.importance, docked.result.importance)
        if model == "paper":  # model side = paper size: the CLI and the dock see one image
            _assert_same(cli_rows, _rows(outcome.result))


def test_the_engine_call_is_the_model_run_by_hand(breasts):
    cc, mlo = (open_mammogram(path) for path in breasts[0])
    model = load_topksiglip("topksiglip-demo")
    side = model.config.image_size
    for view_size in (None, PAPER_VIEW_SIZE):
        by_hand_breast = breast_image(cc, mlo, size=view_size or (side, side // 2))
        by_hand = predict_topk(model, by_hand_breast, k=int(model.config.k))
        engine = topk(cc, mlo, model, view_size=view_size)  # K: the model's own
        assert engine.k == model.config.k and engine.model is model
        assert engine.cc is cc and engine.mlo is mlo  # opened views pass through
        np.testing.assert_array_equal(engine.breast.image, by_hand_breast.image)
        _assert_same(_rows(engine.result), _rows(by_hand))
        np.testing.assert_array_equal(engine.result.embedding, by_hand.embedding)
        assert engine.boxes is engine.result.boxes and engine.scores is engine.result.scores


def test_k_outside_the_candidates_is_one_sentence_naming_the_model(breasts):
    model = load_topksiglip("topksiglip-demo")  # an 8 x 8 grid: 64 candidates
    assert resolve_k(model, None) == model.config.k and resolve_k(model, 64) == 64
    with pytest.raises(ConfigError) as raised:
        resolve_k(model, 65, "topksiglip-demo")
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
