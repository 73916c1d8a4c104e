"""TopKSigLIP task on the shared loop, its losses, and the mammography evaluation."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS
from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.mammography import evaluated_k
from medvl_engine.models.topksiglip import build_topksiglip
from medvl_engine.models.topksiglip_folder import load_topksiglip
from medvl_engine.tasks.topksiglip.cohorts import shuffle_sentences
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.evaluation import (
    MammoEvalOutputs,
    linear_probe_auroc,
    localisation_metrics,
    zero_shot_metrics,
)
from medvl_engine.tasks.topksiglip.task import build_task
from medvl_engine.tasks.topksiglip.training_task import TopKSigLIPTask, selection_metrics
from medvl_engine.training import RunConfig, train

torch.set_num_threads(1)


# Loss terms of one training step of a seeded tiny model, for each objective / target pair,
# recorded when these settings were fields of the model config: the task config gives the same
# losses.
RECORDED_LOSSES = {
    ("sigmoid", "tabular", 5.0): ("sup_sigmoid", 5.7871413, 10.3776197),
    ("sigmoid", "identity", 2.0): ("sup_sigmoid", 2.5269566, 4.3631477),
    ("contrastive", "tabular", 5.0): ("contrastive", 2.6394496, 7.229928),
    ("contrastive", "identity", 0.5): ("contrastive", 1.4148846, 1.8739324),
}


@pytest.mark.parametrize(("objective", "target", "dice_weight"), list(RECORDED_LOSSES))
def test_loss_settings_give_the_recorded_loss_values(
    tmp_path, objective, target, dice_weight, tiny_topk_values
):
    config = TopKSigLIPTaskConfig(
        **tiny_topk_values(logit_bias_init=-1.0),
        objective=objective,
        target=target,
        dice_weight=dice_weight,
    )
    task = TopKSigLIPTask(
        config, RunConfig(out_dir=str(tmp_path / "run"), progress=False), read_train_val=False
    )
    torch.manual_seed(0)
    model = build_topksiglip(config.model_config(), work_dir=tmp_path / "tok").train()
    gen = torch.Generator().manual_seed(1)
    reports = ["mass in the upper quadrant", "no finding", "calcifications", "dense breast"]
    roi = torch.zeros(4, 8, 8)
    roi[0, 2:4, 3:5] = 1
    roi[2, 5:7, 1:3] = 1
    nan = float("nan")
    batch = {
        "images": torch.rand(4, 1, 256, 256, generator=gen),
        **model.tokenize(reports),
        "attributes": torch.tensor(
            [[1, 0, 1, 0, 1], [0, 1, 0, 1, 0], [1, 0, 0, 1, 1], [1, 0, 1, 0, nan]]
        ),
        "has_roi": torch.tensor([True, False, True, False]),
        "roi_mask": roi,
    }
    torch.manual_seed(2)  # the Gumbel noise of the TopK selection
    losses = task.compute_losses(model, batch)
    key, align, total = RECORDED_LOSSES[(objective, target, dice_weight)]
    assert losses[key].item() == pytest.approx(align, rel=1e-5)
    assert losses["dice"].item() == pytest.approx(0.9180957, rel=1e-5)
    assert losses["loss"].item() == pytest.approx(total, rel=1e-5)
    assert not hasattr(model.config, "objective")  # a training setting, not the model's


def test_pointing_weight_adds_the_roi_pointing_loss_of_the_scorer(tmp_path, tiny_topk_values):
    from medvl_engine.losses import roi_pointing_loss

    losses = {}
    for weight in (0.0, 2.0):
        config = TopKSigLIPTaskConfig(**tiny_topk_values(), pointing_weight=weight)
        task = TopKSigLIPTask(
            config, RunConfig(out_dir=str(tmp_path / "run"), progress=False), read_train_val=False
        )
        torch.manual_seed(0)
        model = build_topksiglip(config.model_config(), work_dir=tmp_path / "tok").train()
        with torch.no_grad():  # a scorer that is not constant, so the term is not ln(N / |ROI|)
            model.scorer_head.weight.normal_(generator=torch.Generator().manual_seed(3))
        roi = torch.zeros(2, 8, 8)
        roi[0, 2:4, 3:5] = 1
        batch = {
            "images": torch.rand(2, 1, 256, 256, generator=torch.Generator().manual_seed(1)),
            **model.tokenize(["mass", "no finding"]),
            "attributes": torch.tensor([[1, 0, 1, 0, 1], [0, 1, 0, 1, 0.0]]),
            "has_roi": torch.tensor([True, False]),
            "roi_mask": roi,
        }
        torch.manual_seed(2)
        losses[weight] = task.compute_losses(model, batch)
        with torch.no_grad():
            want = roi_pointing_loss(
                model.importance_logits(batch["images"][:1]), roi[:1].flatten(1)
            )
    assert "pointing" not in losses[0.0]
    assert losses[2.0]["pointing"].item() == pytest.approx(want.item(), rel=1e-5)
    assert losses[2.0]["loss"].item() == pytest.approx(
        losses[0.0]["loss"].item() + 2.0 * want.item(), rel=1e-5
    )


def test_selection_metric_weighs_cancer_auroc_and_pointing_game_equally():
    assert selection_metrics({"auroc_cancer": 0.9, "pointing_game": 0.7}) == {
        "cancer_pointing_mean": pytest.approx(0.8)
    }
    assert selection_metrics({"auroc_cancer": 0.9}) == {}  # no breast with an ROI


def test_shuffle_sentences_keeps_every_sentence():
    import random

    sentences = [
        "there is a mass seen in the breast.",
        "The breast is extremely dense.",
        "BIRADS 4: S \u2013 Suspicious.",
        "Biopsy confirms the presence of cancer.",
    ]
    orders = {shuffle_sentences(" ".join(sentences), random.Random(seed)) for seed in range(8)}
    assert len(orders) > 1
    for shuffled in orders:
        assert sorted(shuffled.replace(". ", ".\n").splitlines()) == sorted(sentences)


@pytest.mark.parametrize(
    ("objective", "target"), [("sigmoid", "tabular"), ("contrastive", "tabular")]
)
def test_training_steps_on_synthetic_mammograms(tmp_path, objective, target, tiny_topk_values):
    task_config = TopKSigLIPTaskConfig(
        **tiny_topk_values(tau_anneal_steps=4, context_length=200),
        objective=objective,
        target=target,
        synthetic_train=4,
        synthetic_eval=4,
        synthetic_size=[192, 128],
        synthetic_dir=str(tmp_path.parent / "topk-synthetic"),
        batch_size=2,
        report_shuffle=True,
        eval_k=1,
    )
    run = RunConfig(lr=1e-3, epochs=1, out_dir=str(tmp_path / "run"), progress=False)
    task = build_task(task_config, run)
    summary = train(task, run)
    assert summary["steps"] == 2
    assert all(np.isfinite(summary["losses"]))
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x.get("event") == "step"]
    assert steps and "dice" in steps[0] and ("sup_sigmoid" in steps[0] or "contrastive" in steps[0])
    model = load_topksiglip(tmp_path / "run" / "final")
    assert int(model.train_forwards) == 2  # tau schedule state travels with the weights
    assert model.tau() == pytest.approx(1.0 + (2 / 3 - 1.0) * 2 / 4)
    # the folder records the K it was evaluated with: the default K of medvl topk and the dock
    assert evaluated_k(tmp_path / "run" / "final") == 1 != int(model.config.k)


class _PromptModel:
    """encode_text maps each prompt to a fixed unit vector; logit_scale 10."""

    def __init__(self, dim=64):
        self.log_logit_scale = torch.zeros(())
        self.logit_scale = torch.tensor(10.0)
        prompts = [p for _, ps in ZERO_SHOT_PROMPTS.values() for p in ps]
        gen = torch.Generator().manual_seed(0)
        self.table = {
            p: torch.nn.functional.normalize(torch.randn(dim, generator=gen), dim=0)
            for p in prompts
        }

    def encode_text(self, texts):
        return torch.stack([self.table[t] for t in texts])


def test_zero_shot_metrics_perfect_and_inverted():
    model = _PromptModel()
    rng = np.random.default_rng(0)
    cancer = rng.random(30) < 0.4
    pos = model.table[ZERO_SHOT_PROMPTS["cancer"][1][1]]
    neg = model.table[ZERO_SHOT_PROMPTS["cancer"][1][0]]
    emb = torch.stack([pos if c else neg for c in cancer])
    outputs = MammoEvalOutputs(
        embeddings=emb,
        importance=None,
        birads=np.where(cancer, 5, 1),
        density=rng.integers(0, 4, 30),
        cancer=cancer,
        findings=np.zeros((30, 4), bool),
        boxes=[np.zeros((0, 4))] * 30,
    )
    metrics = zero_shot_metrics(model, outputs)
    assert metrics["auroc_cancer"] == pytest.approx(1.0)
    assert "auroc_mass" not in metrics  # no positives: undefined, left out
    outputs.cancer = ~cancer
    assert zero_shot_metrics(model, outputs)["auroc_cancer"] == pytest.approx(0.0)


def test_localisation_metrics():
    geometry = PatchGeometry.from_image(256, 8, 0.5)
    good = np.full((2, 8, 8), 0.01)
    good[0, 2, 5] = 1.0
    good[1, 6, 1] = 1.0
    edges = geometry.cell_bounds()
    boxes = [  # each box is exactly the cell of the candidate the map points at
        np.array([[edges[5], edges[2], edges[6], edges[3]]]),
        np.array([[edges[1], edges[6], edges[2], edges[7]]]),
    ]
    outputs = MammoEvalOutputs(
        embeddings=torch.zeros(2, 4),
        importance=good,
        birads=np.ones(2),
        density=np.zeros(2),
        cancer=np.zeros(2, bool),
        findings=np.zeros((2, 4), bool),
        boxes=boxes,
    )
    metrics = localisation_metrics(outputs, geometry, tolerance=0)
    assert metrics["pointing_game"] == 1.0
    assert metrics["pixel_ap"] > 0.9 and metrics["pixel_ap_chance"] < 0.05
    assert metrics["pointing_game_chance"] == pytest.approx(1 / 64)
    outputs.importance = good[::-1].copy()  # maps swapped between the two breasts
    assert localisation_metrics(outputs, geometry, tolerance=0)["pointing_game"] == 0.0


def test_linear_probe_separable():
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 3
    x = torch.randn(60, 8, generator=gen) * 0.1
    x[torch.arange(60), labels] += 1.0
    train_x, train_y, test_x, test_y = x[:40], labels[:40].numpy(), x[40:], labels[40:].numpy()
    assert linear_probe_auroc(train_x, train_y, test_x, test_y, 3, steps=2000) > 0.95


def test_recipes_parse_with_the_paper_values(tmp_path):
    from pathlib import Path

    from medvl_engine.tasks.topksiglip.task import CONFIG_CLASS
    from medvl_engine.training import load_config

    train_dir = Path(__file__).resolve().parents[3] / "train"
    manifest = tmp_path / "m.csv"  # the manifest must exist when the config is loaded
    manifest.write_text("breast_id,split\n")
    run, task = load_config(
        train_dir / "topksiglip_embed.yaml", [f"task.manifest={manifest}"], CONFIG_CLASS
    )
    assert (run.lr, run.weight_decay, run.max_steps, task.batch_size) == (1e-5, 0.05, 100_000, 32)
    assert (task.image_size, task.grid, task.k, task.low_res_factor) == (1536, 16, 15, 3)
    assert task.geometry().patch_size == 181 and task.context_length == 170
    assert (task.dice_weight, task.logit_scale_init, task.tau_start) == (5.0, 10.0, 1.0)
    assert task.tau_end == pytest.approx(2 / 3)
    run, task = load_config(train_dir / "topksiglip_demo.yaml", [], CONFIG_CLASS)
    assert task.synthetic_train > 0 and task.synthetic_eval > 0 and task.k < 15


def test_manifest_breasts_are_not_all_kept_in_memory(tmp_path, tiny_topk_values):
    from medvl_engine.synthetic import make_mammogram_cohort

    make_mammogram_cohort(tmp_path / "cohort", 4, seed=3, size=(192, 128))
    manifest = tmp_path / "cohort" / "manifest.csv"
    with manifest.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    with manifest.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([{**row, "split": "train"} for row in rows])
    task_config = TopKSigLIPTaskConfig(
        **tiny_topk_values(), manifest=str(manifest), eval_split="train", batch_size=2
    )
    task = build_task(task_config, RunConfig(out_dir=str(tmp_path / "run"), progress=False))
    first = task.train_set.breast(0)[0]
    assert task.train_set._cache is None and task.eval_set._cache is None
    np.testing.assert_array_equal(task.train_set.breast(0)[0], first)  # decoded again, same
    synthetic = build_task(
        TopKSigLIPTaskConfig(
            **tiny_topk_values(),
            synthetic_train=2,
            synthetic_size=[192, 128],
            synthetic_dir=str(tmp_path / "synthetic"),
        ),
        RunConfig(out_dir=str(tmp_path / "run2"), progress=False),
    )
    synthetic.train_set.breast(0)
    assert 0 in synthetic.train_set._cache  # a small synthetic cohort stays decoded in memory
