"""Metrics against values computed by hand from their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from medvl_engine.evaluation import (
    auroc,
    average_precision,
    balanced_accuracy,
    bootstrap_interval,
    bootstrap_std,
    macro_auroc,
    pointing_game,
    pointing_game_rate,
)
from medvl_engine.tasks.limit.evaluation import SlideExample, zero_shot_patches, zero_shot_slides


def test_auroc_counts_pairs_and_half_counts_ties():
    # pairs (pos, neg): (0.8,0.3) (0.8,0.5) (0.8,0.5') (0.4,0.3) (0.4,0.5) (0.4,0.5')
    # wins: 1 1 1 1 0 0 -> 4 / 6
    assert auroc([1, 0, 1, 0, 0], [0.8, 0.3, 0.4, 0.5, 0.5]) == pytest.approx(4 / 6)
    # one tie between a positive and a negative counts 1/2: (1 + 0.5) / 2
    assert auroc([1, 0, 0], [0.5, 0.5, 0.1]) == pytest.approx(0.75)
    assert auroc([True, False], [0.2, 0.9]) == 0.0
    with pytest.raises(ValueError, match="both positive and negative"):
        auroc([1, 1], [0.1, 0.2])


def test_macro_auroc_is_mean_of_one_vs_rest():
    labels = [0, 1, 2, 0]
    scores = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.3, 0.6], [0.3, 0.4, 0.3]])
    per_class = [
        auroc([1, 0, 0, 1], scores[:, 0]),
        auroc([0, 1, 0, 0], scores[:, 1]),
        auroc([0, 0, 1, 0], scores[:, 2]),
    ]
    assert macro_auroc(labels, scores) == pytest.approx(np.mean(per_class))
    assert per_class == [1.0, 1.0, 1.0]


def test_average_precision_by_hand():
    # ranked: 0.9(+) 0.8(-) 0.7(+) 0.1(-): P at the hits 1/1 and 2/3, recall steps 1/2 each
    assert average_precision([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1]) == pytest.approx(
        0.5 * 1 + 0.5 * (2 / 3)
    )
    # a tie between a positive and a negative at the top: one threshold, P = 1/2, R = 1
    assert average_precision([1, 0], [0.5, 0.5]) == pytest.approx(0.5)


def test_balanced_accuracy_by_hand():
    labels = ["a", "a", "a", "a", "b", "c", "c"]
    predictions = ["a", "a", "a", "b", "b", "a", "c"]
    assert balanced_accuracy(labels, predictions) == pytest.approx((3 / 4 + 1 + 1 / 2) / 3)
    assert balanced_accuracy([0, 0, 1], [0, 0, 0]) == pytest.approx(0.5)


def test_bootstrap_std_is_zero_for_constant_and_matches_manual_resampling():
    assert bootstrap_std(balanced_accuracy, [0, 1, 0, 1], [0, 1, 0, 1], trials=50) == 0.0
    labels = np.array([0, 1, 1, 0, 1, 0, 0, 1])
    predictions = np.array([0, 1, 0, 0, 1, 1, 0, 1])
    rng = np.random.default_rng(7)
    manual = []
    for _ in range(200):
        rows = rng.integers(0, 8, size=8)
        manual.append(balanced_accuracy(labels[rows], predictions[rows]))
    expected = np.std(manual)
    got = bootstrap_std(balanced_accuracy, labels, predictions, trials=200, seed=7)
    assert got == pytest.approx(expected) and 0.05 < got < 0.3
    assert math.isnan(bootstrap_std(auroc, [1, 1], [0.1, 0.2], trials=10))


def test_bootstrap_interval_matches_manual_percentile_resampling():
    labels = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1])
    scores = np.array([0.9, 0.2, 0.4, 0.8, 0.5, 0.1, 0.7, 0.6, 0.3, 0.35, 0.05, 0.95])
    point, low, high, std = bootstrap_interval(auroc, labels, scores, n_resamples=300, seed=3)
    rng = np.random.default_rng(3)
    manual = []
    for _ in range(300):
        rows = rng.integers(0, len(labels), size=len(labels))
        if labels[rows].all() or not labels[rows].any():
            continue  # one class only: AUROC undefined, skipped like the helper does
        manual.append(auroc(labels[rows], scores[rows]))
    assert point == pytest.approx(auroc(labels, scores))
    assert low == pytest.approx(np.quantile(manual, 0.025))
    assert high == pytest.approx(np.quantile(manual, 0.975))
    assert std == pytest.approx(np.std(manual))
    assert low < point < high and 0.0 < std < 0.3
    # a narrower level gives a narrower interval from the same resamples
    _, low_80, high_80, _ = bootstrap_interval(
        auroc, labels, scores, n_resamples=300, seed=3, level=0.8
    )
    assert low <= low_80 < high_80 <= high


def test_bootstrap_interval_is_seeded_and_degenerate_cases_are_explicit():
    labels = np.array([0, 1, 0, 1, 1, 0])
    predictions = np.array([0, 1, 1, 1, 0, 0])
    first = bootstrap_interval(balanced_accuracy, labels, predictions, n_resamples=100, seed=5)
    again = bootstrap_interval(balanced_accuracy, labels, predictions, n_resamples=100, seed=5)
    other = bootstrap_interval(balanced_accuracy, labels, predictions, n_resamples=100, seed=6)
    assert first == again and first != other
    assert bootstrap_interval(balanced_accuracy, [1, 1, 0], [1, 1, 0], n_resamples=20) == (
        1.0,
        1.0,
        1.0,
        0.0,
    )
    # no defined resample: the point stands, the interval and std are NaN (never a guess)
    point, low, high, std = bootstrap_interval(auroc, [1, 0], [0.9, 0.1], n_resamples=0)
    assert point == 1.0 and all(math.isnan(v) for v in (low, high, std))
    with pytest.raises(ValueError, match="same length"):
        bootstrap_interval(auroc, [1, 0, 1], [0.2, 0.3])
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval(auroc, [1, 0], [0.2, 0.3], level=1.5)


def test_pointing_game_uses_argmax_and_half_open_boxes():
    heatmap = np.zeros((10, 20))
    heatmap[4, 12] = 1.0  # row 4, column 12 -> (x=12, y=4)
    assert pointing_game(heatmap, [[10, 3, 13, 5]])
    assert not pointing_game(heatmap, [[13, 0, 20, 10]])  # x0 = 13 > 12
    assert not pointing_game(heatmap, [[0, 0, 12, 10]])  # x1 = 12 is exclusive
    assert pointing_game(heatmap, [[0, 0, 1, 1], [12, 4, 13, 5]])
    rate = pointing_game_rate([heatmap, heatmap, heatmap], [[[10, 3, 13, 5]], [[0, 0, 1, 1]], []])
    assert rate == pytest.approx(0.5)


def test_zero_shot_slides_is_organ_restricted_with_tissue_prompts():
    vocabulary = {"breast tumor": 0, "breast fat": 1, "lung tumor": 2, "lung fat": 3, "fat": 1}
    prompts_seen = []

    def encode(texts):
        prompts_seen.extend(texts)
        return torch.eye(4)[[vocabulary[t] for t in texts]]

    def slide(dim, organ, label, noise=0.0):
        features = torch.zeros(6, 4)
        features[:, dim] = 1.0
        features[:, (dim + 1) % 4] = noise
        return SlideExample(features, organ, label)

    slides = [
        slide(0, "breast", "tumor"),
        slide(1, "breast", "fat"),
        slide(2, "lung", "tumor"),
        slide(2, "lung", "fat"),  # wrong on purpose: looks like lung tumor
        slide(3, "lung", "fat"),
    ]
    result = zero_shot_slides(
        slides, {"breast": ["tumor", "fat"], "lung": ["tumor", "fat"]}, encode, 0.05, trials=20
    )
    assert set(prompts_seen) == {"breast tumor", "breast fat", "lung tumor", "lung fat"}
    assert result["per_organ"]["breast"]["balanced_accuracy"] == 1.0
    assert result["per_organ"]["lung"]["balanced_accuracy"] == pytest.approx((1 + 0.5) / 2)
    assert result["overall"]["balanced_accuracy"] == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    assert result["organ_mean"] == pytest.approx(0.875)
    assert result["per_organ"]["lung"]["n"] == 3
    with pytest.raises(ValueError, match="not among the choices"):
        zero_shot_slides([slide(0, "breast", "necrosis")], {"breast": ["tumor"]}, encode, 0.05)


def test_zero_shot_patches_accuracy_and_auroc():
    def encode(texts):
        return torch.eye(2)[[0 if t == "stroma" else 1 for t in texts]]

    features = torch.tensor([[1.0, 0.1], [0.9, 0.3], [0.2, 1.0], [0.6, 0.5]])
    result = zero_shot_patches(features, [0, 0, 1, 1], ["stroma", "tumor"], encode, trials=20)
    assert result["balanced_accuracy"] == pytest.approx(0.5 * 1 + 0.5 * 0.5)
    assert result["auroc"] == pytest.approx(1.0)  # tumor-minus-stroma ranks both tumors on top
