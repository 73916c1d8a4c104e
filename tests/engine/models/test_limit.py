"""LIMIT pooling (Eq. 1-2) against a naive loop, bag scoring, zero-shot scores, save/load."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from medvl_engine.losses import weighted_infonce
from medvl_engine.models.limit import (
    LimitModel,
    bag_similarity,
    load_limit_model,
    pool_patches,
    report_guided_pool,
    save_limit_text_tower,
)


def _naive_pool(v: torch.Tensor, r: torch.Tensor, tau: float, mask) -> torch.Tensor:
    """Eq. 1-2 written out with Python loops for one bag v [M, D] and one query r [D]."""
    real = [i for i in range(v.shape[0]) if mask is None or bool(mask[i])]
    weights = [math.exp(float(v[i] @ r) / tau) for i in real]
    total = sum(weights)
    h = torch.zeros(v.shape[1], dtype=torch.float64)
    for weight, i in zip(weights, real, strict=True):
        h += (weight / total) * v[i].double()
    return h


def test_report_guided_pool_matches_naive_loop_with_masks():
    generator = torch.Generator().manual_seed(0)
    features = F.normalize(torch.randn(3, 7, 5, generator=generator), dim=-1)
    queries = F.normalize(torch.randn(3, 4, 5, generator=generator), dim=-1)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    mask[2, 1] = False
    pooled = report_guided_pool(features, queries, 0.1, mask)
    assert pooled.shape == (3, 4, 5)
    for b in range(3):
        for q in range(4):
            expected = _naive_pool(features[b], queries[b, q], 0.1, mask[b])
            torch.testing.assert_close(pooled[b, q].double(), expected, rtol=1e-5, atol=1e-6)


def test_padding_gets_zero_weight_and_inputs_are_used_as_given():
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(6, 4, generator=generator) * 3  # not normalised: used as given
    query = torch.randn(1, 4, generator=generator)
    mask = torch.tensor([True, True, True, False, False, True])
    pooled, attention = report_guided_pool(features, query, 0.5, mask, return_attention=True)
    assert attention[0, 3] == 0 and attention[0, 4] == 0
    assert attention.sum() == pytest.approx(1.0)
    changed = features.clone()
    changed[3:5] = 1e4  # garbage in the padding
    torch.testing.assert_close(report_guided_pool(changed, query, 0.5, mask), pooled)
    torch.testing.assert_close(pooled[0].double(), _naive_pool(features, query[0], 0.5, mask))
    empty = report_guided_pool(features, query, 0.5, torch.zeros(6, dtype=torch.bool))
    assert torch.equal(empty, torch.zeros(1, 4))


def test_small_tau_approaches_argmax_and_large_tau_the_mean():
    features = torch.eye(3)
    query = torch.tensor([[0.2, 0.9, 0.1]])
    sharp = report_guided_pool(features, query, 1e-3)
    flat = report_guided_pool(features, query, 1e3)
    torch.testing.assert_close(sharp, torch.tensor([[0.0, 1.0, 0.0]]))
    torch.testing.assert_close(flat, torch.full((1, 3), 1 / 3), atol=1e-3, rtol=0)


def test_pooling_methods_mean_topk_random():
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [5.0, 5.0]])
    mask = torch.tensor([True, True, True, False])
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    mean = pool_patches(features, queries, "mean", mask=mask)
    torch.testing.assert_close(mean, torch.tensor([[2 / 3, 2 / 3], [2 / 3, 2 / 3]]))
    top1 = pool_patches(features, queries, "topk", mask=mask, k=1)
    # query (1, 0): scores 1, 0, 1 -> a tie resolved by topk, either patch 0 or 2 scores x=1
    assert top1[0, 0] == 1.0 and top1[1, 1] == 1.0
    top2 = pool_patches(features, queries, "topk", mask=mask, k=2)
    torch.testing.assert_close(top2[0], torch.tensor([1.0, 0.5]))
    top10 = pool_patches(features, queries, "topk", mask=mask, k=10)  # k > bag: all real ones
    torch.testing.assert_close(top10, mean)
    generator = torch.Generator().manual_seed(0)
    random = pool_patches(features, queries, "random", mask=mask, generator=generator)
    assert random.shape == (2, 2) and torch.equal(random[0], random[1])
    assert 0 <= random[0, 0] <= 1 and 0 <= random[0, 1] <= 1  # convex mix of real patches only
    with pytest.raises(ValueError, match="pooling method"):
        pool_patches(features, queries, "max", mask=mask)


def test_bag_similarity_entries():
    generator = torch.Generator().manual_seed(2)
    features = F.normalize(torch.randn(3, 5, 8, generator=generator), dim=-1)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[0, 3:] = False
    reports = F.normalize(torch.randn(3, 8, generator=generator), dim=-1)
    similarity = bag_similarity(features, reports, 0.07, mask)
    assert similarity.shape == (3, 3)
    for i in range(3):
        for j in range(3):
            h = _naive_pool(features[i], reports[j], 0.07, mask[i])
            expected = F.cosine_similarity(h.float(), reports[j], dim=0)
            assert similarity[i, j] == pytest.approx(float(expected), abs=1e-5)


def test_model_forward_gradients_reach_only_the_text_tower(tmp_path, tiny_tower):
    model = LimitModel(tiny_tower(tmp_path / "bert", out_dim=16), tau_attn=0.05)
    texts = ["invasive carcinoma", "adipose tissue", "no tumor seen", "stroma", "necrosis"]
    tokens = model.text_tower.tokenize(texts)
    features = torch.randn(5, 40, 16, requires_grad=False)
    mask = torch.ones(5, 40, dtype=torch.bool)
    mask[2, 10:] = False
    similarity, reports = model(features, mask, tokens["input_ids"], tokens["attention_mask"])
    assert similarity.shape == (5, 5) and reports.shape == (5, 16)
    torch.testing.assert_close(reports.norm(dim=-1), torch.ones(5))
    assert similarity.abs().max() <= 1.0 + 1e-5
    weighted_infonce(similarity, reports, tau=0.07).backward()
    projection_grad = model.text_tower.projection.weight.grad
    assert projection_grad is not None and projection_grad.abs().sum() > 0
    assert model.logit_scale.grad is None  # only SigLIT uses it
    assert features.grad is None


def test_zero_shot_scores_pick_the_matching_class():
    class Identity(torch.nn.Module):
        output_dim = 3

    model = LimitModel(Identity(), tau_attn=0.05)
    classes = torch.eye(3)
    bag = torch.tensor([[0.0, 1.0, 0.0]] * 5 + [[0.1, 0.1, 1.0]] * 2)
    scores = model.slide_scores(bag, classes)
    assert scores.shape == (3,)
    assert scores.argmax().item() in (1, 2)
    for method in ("mean", "topk"):
        batched = model.slide_scores(bag.expand(2, -1, -1), classes, pooling=method, k=5)
        assert batched.shape == (2, 3) and batched[0].argmax().item() == 1


def test_bag_of_20000_patches_fits_and_backpropagates(tmp_path, tiny_tower):
    model = LimitModel(tiny_tower(tmp_path / "bert", out_dim=64))
    tokens = model.text_tower.tokenize(["tumor", "stroma", "fat", "necrosis", "lymphocytes"])
    features = torch.randn(5, 20000, 64)
    mask = torch.ones(5, 20000, dtype=torch.bool)
    mask[1:, 15000:] = False
    similarity, reports = model(features, mask, tokens["input_ids"], tokens["attention_mask"])
    weighted_infonce(similarity, reports).backward()
    assert torch.isfinite(similarity).all()


def test_save_and_load_text_tower_round_trip(tmp_path, tiny_tower):
    model = LimitModel(tiny_tower(tmp_path / "bert", out_dim=16), tau_attn=0.08)
    model.vision_encoder = "medvl-demo"
    folder = save_limit_text_tower(model, tmp_path / "tuned")
    config = (folder / "config.json").read_text()
    assert '"model_type": "medvl-text-tower"' in config and '"tau_attn": 0.08' in config
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    loaded = load_limit_model(folder)
    assert loaded.tau_attn == pytest.approx(0.08) and loaded.vision_encoder == "medvl-demo"
    texts = ["invasive carcinoma of the breast", "fat"]
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_texts(texts), model.encode_texts(texts))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tuned")]
