"""Losses against naive references written directly from the papers' equations."""

from __future__ import annotations

import math

import pytest
import torch

from medvl_engine.losses import (
    clip_contrastive_loss,
    negative_weights,
    siglit_loss,
    soft_dice_loss,
    sup_sigmoid_loss,
    tabular_similarity,
    weighted_infonce,
)


def naive_weighted_infonce(sim, reports, tau, weighted):
    K = sim.shape[0]
    total = 0.0
    for i in range(K):
        num = math.exp(sim[i, i] / tau)
        den = num
        for j in range(K):
            if j == i:
                continue
            ri, rj = reports[i], reports[j]
            cos = float(ri @ rj / (ri.norm() * rj.norm()))
            w = 1 - (cos + 1) / 2 if weighted else 1.0
            den += w * math.exp(sim[i, j] / tau)
        total += -math.log(num / den)
    return total / K


@pytest.mark.parametrize("weighted", [True, False])
def test_weighted_infonce_matches_equation(weighted):
    g = torch.Generator().manual_seed(0)
    sim = torch.rand(5, 5, generator=g, dtype=torch.float64) * 2 - 1
    reports = torch.randn(5, 16, generator=g, dtype=torch.float64)
    got = weighted_infonce(sim, reports, tau=0.07, weighted=weighted)
    want = naive_weighted_infonce(sim, reports, 0.07, weighted)
    assert got.item() == pytest.approx(want, rel=1e-5)


def test_weighted_infonce_hand_value():
    # K = 2, orthogonal reports -> w = 1/2; s = [[1, 0], [0, 1]], tau = 1.
    sim = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    reports = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    want = -math.log(math.e / (math.e + 0.5))
    assert weighted_infonce(sim, reports, tau=1.0).item() == pytest.approx(want, rel=1e-6)
    plain = -math.log(math.e / (math.e + 1.0))
    assert weighted_infonce(sim, reports, tau=1.0, weighted=False).item() == pytest.approx(plain)


def test_weights_carry_no_gradient_and_identical_reports_vanish():
    reports = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    w = negative_weights(reports)
    assert not w.requires_grad
    assert w[0, 1].item() == pytest.approx(0.0)
    assert w[0, 2].item() == pytest.approx(0.5)
    sim = torch.randn(3, 3, requires_grad=True)
    weighted_infonce(sim, reports).backward()
    assert reports.grad is None or torch.all(reports.grad == 0)
    assert sim.grad is not None


def test_siglit_matches_equation():
    s = torch.tensor([0.3, -0.2, 0.9])
    y = torch.tensor([1.0, -1.0, -1.0])
    scale, bias = 10.0, -1.0
    want = (
        -sum(
            math.log(1 / (1 + math.exp(-yi * (scale * si + bias))))
            for si, yi in zip(s.tolist(), y.tolist(), strict=True)
        )
        / 3
    )
    assert siglit_loss(s, y, scale, bias).item() == pytest.approx(want, rel=1e-6)
    assert siglit_loss(s, y > 0, scale, bias).item() == pytest.approx(want, rel=1e-6)


def naive_sup_sigmoid(zv, zt, S, scale, bias):
    zv = zv / zv.norm(dim=1, keepdim=True)
    zt = zt / zt.norm(dim=1, keepdim=True)
    B = zv.shape[0]
    total = 0.0
    for i in range(B):
        for j in range(B):
            p = 1 / (1 + math.exp(-(scale * float(zv[i] @ zt[j]) + bias)))
            s_ij = float(S[i, j])
            total += s_ij * math.log(p) + (1 - s_ij) * math.log(1 - p)
    return -total / B


def test_sup_sigmoid_matches_equation():
    g = torch.Generator().manual_seed(1)
    zv = torch.randn(4, 8, generator=g, dtype=torch.float64)
    zt = torch.randn(4, 8, generator=g, dtype=torch.float64)
    attrs = torch.tensor(
        [[1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 1], [1, 0, 1, 0]], dtype=torch.float64
    )
    S = tabular_similarity(attrs)
    got = sup_sigmoid_loss(zv, zt, S, 10.0, -2.0)
    want = naive_sup_sigmoid(zv, zt, S.double(), 10.0, -2.0)
    assert got.item() == pytest.approx(want, rel=1e-5)
    assert sup_sigmoid_loss(zv, zt, S, 10.0).item() == pytest.approx(
        naive_sup_sigmoid(zv, zt, S.double(), 10.0, 0.0), rel=1e-5
    )


def test_tabular_similarity_values():
    attrs = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]])
    S = tabular_similarity(attrs)
    assert S.shape == (3, 3)
    assert torch.allclose(torch.diagonal(S), torch.ones(3))
    assert S[0, 1].item() == pytest.approx(0.5)
    assert S[0, 2].item() == pytest.approx(0.0)
    assert torch.allclose(S, S.T)


def test_soft_dice_values():
    pred = torch.zeros(2, 4, 4)
    target = torch.zeros(2, 4, 4)
    pred[0, :2] = 1.0
    target[0, :1] = 1.0  # |M P| = 4, |M| = 4, |P| = 8 -> dice 8/12
    pred[1] = 0.5
    target[1] = 1.0  # |M P| = 8, |M| = 16, |P| = 8 -> dice 16/24
    want = ((1 - 8 / 12) + (1 - 16 / 24)) / 2
    assert soft_dice_loss(pred, target).item() == pytest.approx(want, rel=1e-5)
    assert soft_dice_loss(target, target).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError):
        soft_dice_loss(pred, target[:, :2])


def test_clip_contrastive_prefers_matching_pairs():
    z = torch.eye(3)
    good = clip_contrastive_loss(z, z, 10.0)
    bad = clip_contrastive_loss(z, z.roll(1, dims=0), 10.0)
    assert good.item() < 0.01 < bad.item()
