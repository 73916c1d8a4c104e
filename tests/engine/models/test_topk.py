"""TopK-Patch: Eq. 2-4 and 6 against naive references, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.models.topk import (
    crop_patches,
    extract_patches,
    gumbel_topk_relaxed,
    hard_topk,
    selection_mask,
)


def naive_relaxed_topk(log_weights, k, tau, noise):
    """Eq. 2-3 written element by element with Python floats."""
    out = []
    for row_w, row_g in zip(log_weights.tolist(), noise.tolist(), strict=True):
        alpha = [w + g for w, g in zip(row_w, row_g, strict=True)]
        rows = []
        for _ in range(k):
            top = max(a / tau for a in alpha)
            exps = [math.exp(a / tau - top) for a in alpha]
            total = sum(exps)
            e = [x / total for x in exps]
            rows.append(e)
            alpha = [a + math.log(max(1.0 - ei, 1e-20)) for a, ei in zip(alpha, e, strict=True)]
        out.append(rows)
    return torch.tensor(out)


def test_relaxed_topk_matches_naive_loop():
    gen = torch.Generator().manual_seed(0)
    log_w = torch.randn(3, 20, generator=gen, dtype=torch.float64)
    noise = torch.randn(3, 20, generator=gen, dtype=torch.float64)
    for tau in (1.0, 2.0 / 3.0, 0.3):
        got = gumbel_topk_relaxed(log_w, 5, tau, gumbel_noise=noise)
        want = naive_relaxed_topk(log_w, 5, tau, noise)
        assert got.shape == (3, 5, 20)
        torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=1e-4)


def test_rows_sum_to_one_and_are_nonnegative():
    e = gumbel_topk_relaxed(torch.randn(4, 256), 15, 2.0 / 3.0)
    assert (e >= 0).all()
    torch.testing.assert_close(e.sum(-1), torch.ones(4, 15))


def test_small_tau_gives_hard_topk_in_order():
    gen = torch.Generator().manual_seed(1)
    log_w = torch.randn(2, 64, generator=gen)
    noise = torch.randn(2, 64, generator=gen)
    e = gumbel_topk_relaxed(log_w, 6, 1e-4, gumbel_noise=noise)
    expected = torch.topk(log_w + noise, 6, dim=-1).indices
    assert torch.equal(e.argmax(-1), expected)
    assert torch.allclose(e.max(-1).values, torch.ones(2, 6), atol=1e-4)
    # Selected items are not picked twice.
    assert all(len(set(row.tolist())) == 6 for row in e.argmax(-1))


def test_gumbel_sampling_follows_plackett_luce_first_draw():
    # The first selection's argmax is distributed as w / sum(w) (Eq. 1, first factor).
    weights = torch.tensor([0.5, 0.3, 0.15, 0.05])
    log_w = weights.log().expand(20000, 4)
    torch.manual_seed(0)
    first = gumbel_topk_relaxed(log_w, 1, 1e-3)[:, 0].argmax(-1)
    freq = torch.bincount(first, minlength=4).float() / first.numel()
    torch.testing.assert_close(freq, weights, atol=0.015, rtol=0)


def test_selection_mask_values():
    e = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]]])
    mask = selection_mask(e)
    torch.testing.assert_close(mask, torch.tensor([[0.5, 0.75, 0.5]]))
    hard = torch.nn.functional.one_hot(torch.tensor([[2, 0]]), 4).float()
    assert selection_mask(hard).tolist() == [[1.0, 0.0, 1.0, 0.0]]


def test_extract_patches_equals_naive_weighted_sum():
    geom = PatchGeometry.from_image(96, 4, 0.5)
    gen = torch.Generator().manual_seed(2)
    images = torch.rand(2, 3, 96, 96, generator=gen, dtype=torch.float64)
    e = torch.softmax(torch.randn(2, 3, 16, generator=gen, dtype=torch.float64), -1)
    got = extract_patches(images, e, geom)
    p = geom.patch_size
    assert got.shape == (2, 3, 3, p, p)
    origins = geom.origins()
    want = torch.zeros_like(got)
    for b in range(2):
        for j in range(3):
            for n, (x, y) in enumerate(origins):
                want[b, j] += e[b, j, n] * images[b, :, y : y + p, x : x + p]
    torch.testing.assert_close(got, want)


def test_one_hot_extraction_equals_crop():
    geom = PatchGeometry.from_image(128, 8, 0.5)
    images = torch.rand(2, 1, 128, 128)
    idx = torch.tensor([[0, 63, 9], [5, 5, 40]])
    e = torch.nn.functional.one_hot(idx, 64).float()
    torch.testing.assert_close(extract_patches(images, e, geom), crop_patches(images, idx, geom))


def test_extraction_gradient_reaches_log_weights():
    geom = PatchGeometry.from_image(128, 8, 0.5)
    images = torch.rand(2, 1, 128, 128)
    log_w = torch.zeros(2, 64, requires_grad=True)
    e = gumbel_topk_relaxed(log_w, 4, 2.0 / 3.0)
    patches = extract_patches(images, e, geom)
    patches.mean().backward()
    assert log_w.grad is not None
    assert torch.isfinite(log_w.grad).all()
    assert log_w.grad.abs().sum() > 0


def test_gradient_moves_selection_toward_bright_region():
    # Maximising patch brightness must raise the log-weight of the candidate over the bright spot.
    geom = PatchGeometry.from_image(128, 8, 0.5)
    images = torch.zeros(1, 1, 128, 128)
    x0, y0 = geom.origins()[27]
    images[..., y0 : y0 + geom.patch_size, x0 : x0 + geom.patch_size] = 1.0
    log_w = torch.zeros(1, 64, requires_grad=True)
    e = gumbel_topk_relaxed(log_w, 2, 1.0, gumbel_noise=torch.zeros(1, 64))
    extract_patches(images, e, geom).sum().backward()
    assert int(torch.argmax(log_w.grad[0])) == 27  # gradient ascent raises candidate 27


def test_hard_topk_order():
    log_w = torch.tensor([[0.1, 3.0, -1.0, 2.0]])
    assert hard_topk(log_w, 3).tolist() == [[1, 3, 0]]


@pytest.mark.parametrize("k", [0, 65])
def test_bad_k_raises(k):
    with pytest.raises(ValueError, match="k must"):
        gumbel_topk_relaxed(torch.zeros(1, 64), k, 1.0)


def test_saturated_selection_stays_finite():
    log_w = torch.tensor([[100.0, 0.0, 0.0, -100.0]], requires_grad=True)
    e = gumbel_topk_relaxed(log_w, 4, 0.01, gumbel_noise=torch.zeros(1, 4))
    assert torch.isfinite(e).all()
    e[:, 1:].sum().backward()
    assert torch.isfinite(log_w.grad).all()
