"""Losses against naive references written directly from the papers' equations."""

from __future__ import annotations

import math

import pytest
import torch

from medvl_engine.losses import (
    clip_contrastive_loss,
    negative_weights,
    roi_pointing_loss,
    siglit_loss,
    soft_dice_loss,
    soft_target_contrastive_loss,
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


def test_roi_pointing_loss_against_the_equation():
    torch.manual_seed(0)
    logits = torch.randn(3, 5)
    target = torch.tensor([[1, 0, 0, 0, 0], [0, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.float)
    want = 0.0
    for b in range(3):
        weights = [math.exp(v) for v in logits[b].tolist()]
        inside = sum(w for w, m in zip(weights, target[b].tolist(), strict=True) if m)
        want += -math.log(inside / sum(weights))
    assert roi_pointing_loss(logits, target).item() == pytest.approx(want / 3, rel=1e-5)
    assert roi_pointing_loss(logits[2:], target[2:]).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="at least one ROI cell"):
        roi_pointing_loss(logits, torch.zeros(3, 5))
    with pytest.raises(ValueError):
        roi_pointing_loss(logits, target[:, :2])


def test_clip_contrastive_prefers_matching_pairs():
    z = torch.eye(3)
    good = clip_contrastive_loss(z, z, 10.0)
    bad = clip_contrastive_loss(z, z.roll(1, dims=0), 10.0)
    assert good.item() < 0.01 < bad.item()


def test_soft_contrastive_with_identity_is_clip():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 8, generator=gen), torch.randn(5, 8, generator=gen)
    torch.testing.assert_close(
        soft_target_contrastive_loss(a, b, torch.eye(5), 10.0), clip_contrastive_loss(a, b, 10.0)
    )


# -- values and gradients against loop-based references --------------------------------------
# Each reference below is written term by term from the equation in the loss's docstring, with
# scalar operations in Python loops, so autograd gives the gradient the equation defines.


def _leaf(generator, *shape, scale=1.0):
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).requires_grad_()


def assert_value_and_gradients_match(loss, reference, inputs):
    """``loss(*inputs)`` equals ``reference(*inputs)`` and so do their gradients."""
    got = loss(*inputs)
    got_grads = torch.autograd.grad(got, inputs)
    want = reference(*inputs)
    want_grads = torch.autograd.grad(want, inputs)
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
    for got_grad, want_grad in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got_grad.double(), want_grad, rtol=1e-4, atol=1e-6)


def _unit(row):
    return row / torch.sqrt(sum(x * x for x in row))


def _cos(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True)) / torch.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def loop_weighted_infonce(sim, reports, tau):
    """LIMIT Eq. 3-4, w_ij = 1 - (cos(r_i, r_j) + 1) / 2 without gradient."""
    k = sim.shape[0]
    total = 0.0
    for i in range(k):
        positive = torch.exp(sim[i, i] / tau)
        denominator = positive
        for j in range(k):
            if j != i:
                w = 1.0 - (_cos(reports[i], reports[j]).detach() + 1.0) / 2.0
                denominator = denominator + w * torch.exp(sim[i, j] / tau)
        total = total - torch.log(positive / denominator)
    return total / k


def test_weighted_infonce_value_and_gradients():
    g = torch.Generator().manual_seed(10)
    reports = torch.randn(4, 6, generator=g, dtype=torch.float64)  # w carries no gradient
    assert_value_and_gradients_match(
        lambda sim: weighted_infonce(sim, reports, tau=0.07),
        lambda sim: loop_weighted_infonce(sim, reports, 0.07),
        (_leaf(g, 4, 4, scale=0.3),),
    )


def loop_siglit(sim, labels, scale, bias):
    """LIMIT Eq. 6: -1/R sum_i log sigmoid(y_i (scale s_i + bias))."""
    flat_s, flat_y = sim.reshape(-1), labels.reshape(-1)
    total = 0.0
    for s_i, y_i in zip(flat_s, flat_y, strict=True):
        total = total - torch.log(1.0 / (1.0 + torch.exp(-y_i * (scale * s_i + bias))))
    return total / len(flat_s)


def test_siglit_value_and_gradients():
    g = torch.Generator().manual_seed(11)
    labels = torch.where(torch.eye(3, dtype=torch.bool), 1.0, -1.0).double()
    inputs = (_leaf(g, 3, 3, scale=0.5), torch.tensor(8.0, dtype=torch.float64).requires_grad_())
    assert_value_and_gradients_match(
        lambda sim, scale: siglit_loss(sim, labels, scale, -2.0),
        lambda sim, scale: loop_siglit(sim, labels, scale, -2.0),
        inputs,
    )


def loop_sup_sigmoid(z_v, z_t, target, scale, bias):
    """TopKSigLIP Eq. 5: -1/B sum_ij [S_ij log p_ij + (1 - S_ij) log(1 - p_ij)]."""
    b = z_v.shape[0]
    total = 0.0
    for i in range(b):
        for j in range(b):
            logit = scale * sum(x * y for x, y in zip(_unit(z_v[i]), _unit(z_t[j]), strict=True))
            p = 1.0 / (1.0 + torch.exp(-(logit + bias)))
            total = total - (target[i, j] * torch.log(p) + (1 - target[i, j]) * torch.log(1 - p))
    return total / b


def test_sup_sigmoid_value_and_gradients():
    g = torch.Generator().manual_seed(12)
    target = tabular_similarity(torch.tensor([[1, 0, 1], [0, 1, 1], [1, 0, 0.0]])).double()
    inputs = (_leaf(g, 3, 5), _leaf(g, 3, 5), torch.tensor(-1.5, dtype=torch.float64))
    inputs[2].requires_grad_()
    assert_value_and_gradients_match(
        lambda z_v, z_t, bias: sup_sigmoid_loss(z_v, z_t, target, 10.0, bias),
        lambda z_v, z_t, bias: loop_sup_sigmoid(z_v, z_t, target, 10.0, bias),
        inputs,
    )


def loop_tabular_similarity(attributes):
    """Cosine over the entries both rows have (NaN = missing); 1 on the diagonal."""
    b, f = len(attributes), len(attributes[0])
    out = [[0.0] * b for _ in range(b)]
    for i in range(b):
        for j in range(b):
            if i == j:
                out[i][j] = 1.0
                continue
            both = [
                n
                for n in range(f)
                if not math.isnan(attributes[i][n]) and not math.isnan(attributes[j][n])
            ]
            dot = sum(attributes[i][n] * attributes[j][n] for n in both)
            norm_i = math.sqrt(sum(attributes[i][n] ** 2 for n in both))
            norm_j = math.sqrt(sum(attributes[j][n] ** 2 for n in both))
            out[i][j] = dot / (norm_i * norm_j) if norm_i * norm_j > 1e-12 else 0.0
    return out


def test_tabular_similarity_matches_loop_with_missing_fields():
    nan = float("nan")
    rows = [
        [1.0, 0.0, 1.0, 0.0, 1.0],
        [0.0, 1.0, nan, nan, 1.0],
        [1.0, 0.0, 0.0, 1.0, nan],
        [nan, nan, 1.0, 0.0, 0.0],
        [nan, nan, nan, nan, nan],
    ]
    got = tabular_similarity(torch.tensor(rows))
    torch.testing.assert_close(got, torch.tensor(loop_tabular_similarity(rows)))


def loop_soft_dice(pred, target, eps=1e-6):
    """mean_b [1 - (2 sum M P + eps) / (sum M + sum P + eps)] over the pixels of each mask."""
    total = 0.0
    for b in range(pred.shape[0]):
        overlap, size_p, size_m = 0.0, 0.0, 0.0
        for p, m in zip(pred[b].reshape(-1), target[b].reshape(-1), strict=True):
            overlap, size_p, size_m = overlap + p * m, size_p + p, size_m + m
        total = total + 1.0 - (2.0 * overlap + eps) / (size_p + size_m + eps)
    return total / pred.shape[0]


def test_soft_dice_value_and_gradients():
    g = torch.Generator().manual_seed(13)
    pred = torch.rand(2, 4, 4, generator=g, dtype=torch.float64).requires_grad_()
    target = (torch.rand(2, 4, 4, generator=g) > 0.6).double()
    assert_value_and_gradients_match(
        lambda p: soft_dice_loss(p, target), lambda p: loop_soft_dice(p, target), (pred,)
    )


def _log_softmax_row(logits, i):
    normaliser = torch.log(sum(torch.exp(x) for x in logits[i]))
    return [x - normaliser for x in logits[i]]


def _loop_logits(z_v, z_t, scale):
    b = z_v.shape[0]
    return torch.stack(
        [
            torch.stack(
                [
                    scale * sum(x * y for x, y in zip(_unit(z_v[i]), _unit(z_t[j]), strict=True))
                    for j in range(b)
                ]
            )
            for i in range(b)
        ]
    )


def loop_soft_target_contrastive(z_v, z_t, target, scale):
    """1/2 [CE(image -> text, rows of S / row sums) + CE(text -> image, columns / column sums)]."""
    logits = _loop_logits(z_v, z_t, scale)
    b = z_v.shape[0]
    image_to_text, text_to_image = 0.0, 0.0
    for i in range(b):
        log_p = _log_softmax_row(logits, i)
        row_sum = sum(target[i, k] for k in range(b))
        image_to_text = image_to_text - sum(target[i, j] / row_sum * log_p[j] for j in range(b))
    transposed = logits.T
    for j in range(b):
        log_p = _log_softmax_row(transposed, j)
        col_sum = sum(target[k, j] for k in range(b))
        text_to_image = text_to_image - sum(target[i, j] / col_sum * log_p[i] for i in range(b))
    return (image_to_text / b + text_to_image / b) / 2.0


def loop_clip_contrastive(z_v, z_t, scale):
    """(CE(logits, I) + CE(logits^T, I)) / 2: the positive of row i is column i."""
    logits = _loop_logits(z_v, z_t, scale)
    b = z_v.shape[0]
    image_to_text = -sum(_log_softmax_row(logits, i)[i] for i in range(b)) / b
    text_to_image = -sum(_log_softmax_row(logits.T, i)[i] for i in range(b)) / b
    return (image_to_text + text_to_image) / 2.0


def test_clip_contrastive_value_and_gradients():
    g = torch.Generator().manual_seed(14)
    inputs = (_leaf(g, 4, 5), _leaf(g, 4, 5))
    assert_value_and_gradients_match(
        lambda z_v, z_t: clip_contrastive_loss(z_v, z_t, 10.0),
        lambda z_v, z_t: loop_clip_contrastive(z_v, z_t, 10.0),
        inputs,
    )


def test_soft_target_contrastive_value_and_gradients():
    g = torch.Generator().manual_seed(15)
    target = tabular_similarity(
        torch.tensor([[1, 0, 1, 0], [0, 1, 1, 1], [1, 0, 0, 1], [1, 0, 1, 1.0]])
    ).double()
    assert not torch.equal(target, torch.eye(4, dtype=torch.float64))
    inputs = (_leaf(g, 4, 5), _leaf(g, 4, 5))
    assert_value_and_gradients_match(
        lambda z_v, z_t: soft_target_contrastive_loss(z_v, z_t, target, 10.0),
        lambda z_v, z_t: loop_soft_target_contrastive(z_v, z_t, target, 10.0),
        inputs,
    )
