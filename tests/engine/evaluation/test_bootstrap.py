"""Unit-level and paired bootstrap (medvl_engine.evaluation.bootstrap)."""

from __future__ import annotations

import numpy as np
import pytest

from medvl_engine.evaluation.bootstrap import paired_bootstrap, resample_rows, unit_bootstrap
from medvl_engine.evaluation.metrics import auroc, bootstrap_interval


def test_clustered_resample_keeps_every_row_of_a_drawn_unit() -> None:
    units = np.array(["a", "a", "b", "c", "c", "c"])
    rng = np.random.default_rng(3)
    for _ in range(50):
        rows = resample_rows(units, len(units), rng)
        drawn = units[rows]
        for name, size in (("a", 2), ("b", 1), ("c", 3)):
            # a unit enters with all of its rows, k times over
            assert (drawn == name).sum() % size == 0
        # three units drawn, so between 3 (b thrice) and 9 (c thrice) rows
        assert 3 <= len(rows) <= 9


def test_one_row_per_unit_is_the_case_bootstrap() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = labels + rng.normal(0, 1.2, 300)
    ours = unit_bootstrap(auroc, labels, scores, n_resamples=300, seed=5)
    theirs = bootstrap_interval(auroc, labels, scores, n_resamples=300, seed=5)
    assert ours.value == pytest.approx(theirs[0])
    assert ours.n_units == 300
    assert ours.low < ours.value < ours.high
    # same question, independent draws: the interval widths agree within a few percent
    assert (ours.high - ours.low) == pytest.approx(theirs[2] - theirs[1], rel=0.25)


def test_paired_interval_is_narrower_than_the_unpaired_one_and_names_its_unit() -> None:
    rng = np.random.default_rng(1)
    n = 400
    labels = rng.integers(0, 2, n)
    shared = rng.normal(0, 1.0, n)  # both readers err on the same hard cases
    model = labels * 1.4 + shared + rng.normal(0, 0.3, n)
    baseline = labels * 1.0 + shared + rng.normal(0, 0.3, n)
    paired = paired_bootstrap(
        auroc, (labels, model), (labels, baseline), unit="breast", n_resamples=400, seed=2
    )
    assert paired.difference == pytest.approx(auroc(labels, model) - auroc(labels, baseline))
    assert paired.low > 0.0  # a real margin is detected
    a = unit_bootstrap(auroc, labels, model, n_resamples=400, seed=2)
    b = unit_bootstrap(auroc, labels, baseline, n_resamples=400, seed=2)
    assert paired.high - paired.low < 0.7 * ((a.high - a.low) + (b.high - b.low)) / 2
    assert "paired bootstrap over 400 breasts" in paired.describe()


def test_clustered_interval_is_wider_when_rows_of_a_unit_are_copies() -> None:
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 2, 100)
    scores = labels + rng.normal(0, 1.0, 100)
    # every patient contributes the same breast four times: 100 units, not 400
    units = np.repeat(np.arange(100), 4)
    copies = unit_bootstrap(
        auroc, np.repeat(labels, 4), np.repeat(scores, 4), units=units, unit="patient", seed=0
    )
    naive = unit_bootstrap(auroc, np.repeat(labels, 4), np.repeat(scores, 4), seed=0)
    assert copies.n_units == 100 and naive.n_units == 400
    assert (copies.high - copies.low) > 1.6 * (naive.high - naive.low)
    assert copies.describe().endswith("(bootstrap over 100 patients)")


def test_ragged_rows_and_length_mismatch() -> None:
    boxes = [[(0, 0, 1, 1)], [], [(1, 1, 2, 2), (0, 0, 3, 3)]]
    hits = unit_bootstrap(lambda b: float(np.mean([len(x) for x in b])), boxes, n_resamples=20)
    assert hits.value == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap(auroc, ([0, 1], [0.1, 0.2]), ([0, 1, 1], [0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match="units must be"):
        unit_bootstrap(np.mean, [1.0, 2.0], units=[1, 2, 3])


# Twelve breasts, two per patient; a resample with one class only is skipped (AUROC undefined).
PIN_LABELS = np.array([0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0])
PIN_MODEL = np.array([0.1, 0.9, 0.35, 0.7, 0.55, 0.2, 0.8, 0.6, 0.3, 0.4, 0.95, 0.05])
PIN_BASELINE = np.array([0.3, 0.6, 0.5, 0.4, 0.45, 0.1, 0.7, 0.65, 0.2, 0.35, 0.5, 0.25])
PIN_PATIENTS = np.repeat(np.arange(6), 2)


def test_intervals_are_pinned_to_the_bit() -> None:
    # values printed by this release: the draws of a seed and their order must never change
    case = unit_bootstrap(auroc, PIN_LABELS, PIN_MODEL, n_resamples=200, seed=7)
    assert (case.value, case.low, case.high, case.std) == (
        0.9444444444444444,
        0.7700000000000002,
        1.0,
        0.0758472725077148,
    )
    assert case.describe() == "0.944 [0.770, 1.000] (bootstrap over 12 cases)"
    patients = unit_bootstrap(
        auroc, PIN_LABELS, PIN_MODEL, units=PIN_PATIENTS, unit="patient", n_resamples=200, seed=7
    )
    assert (patients.low, patients.high, patients.std) == (
        0.8319444444444447,
        1.0,
        0.05347420631239646,
    )
    assert patients.describe() == "0.944 [0.832, 1.000] (bootstrap over 6 patients)"
    paired = paired_bootstrap(
        auroc,
        (PIN_LABELS, PIN_MODEL),
        (PIN_LABELS, PIN_BASELINE),
        unit="breast",
        n_resamples=200,
        seed=7,
    )
    expected = {
        "model": 0.9444444444444444,
        "baseline": 0.7638888888888888,
        "difference": 0.18055555555555558,
        "low": 0.0,
        "high": 0.4721428571428573,
        "std": 0.1298820487922106,
        "n_units": 12,
        "unit": "breast",
        "n_resamples": 200,
        "level": 0.95,
    }
    assert paired.as_dict() == expected
    assert list(paired.as_dict()) == list(expected)  # the key order of written JSON
    assert paired.describe() == "+0.181 [+0.000, +0.472] (paired bootstrap over 12 breasts)"
    clustered = paired_bootstrap(
        auroc,
        (PIN_LABELS, PIN_MODEL),
        (PIN_LABELS, PIN_BASELINE),
        units=PIN_PATIENTS,
        n_resamples=200,
        seed=7,
    )
    assert (clustered.low, clustered.high, clustered.std) == (0.0, 0.5, 0.13549390603466588)
    assert clustered.describe() == "+0.181 [+0.000, +0.500] (paired bootstrap over 6 cases)"
