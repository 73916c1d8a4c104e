"""LIMIT evaluation at the right unit: diagnoses, the no-text baselines, and fresh-cohort seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medvl_engine.errors import ConfigError
from medvl_engine.tasks.limit.evaluation import SlideExample, organ_mean_bootstrap
from medvl_engine.tasks.limit.evaluation.baselines import (
    linear_probe_rows,
    nearest_centroid_rows,
    slide_vectors,
)
from medvl_engine.tasks.limit.evaluation.scoring import score_zero_shot
from medvl_engine.tasks.limit.evaluation.units import (
    diagnosis_interval,
    paired_margin,
    slide_weights,
    weighted_accuracy,
)

ORGANS = {
    "breast": ["carcinoma", "mastitis", "fat necrosis"],
    "lung": ["adenocarcinoma", "pneumonia", "infarct"],
    "colon": ["adenocarcinoma", "colitis", "necrosis"],
    "kidney": ["rcc", "pyelonephritis", "infarction"],
}


def _rows(wrong: set[tuple[str, str]], per_diagnosis: int = 10, rng=None) -> list[tuple]:
    """Rows of 12 diagnoses; every slide of a diagnosis in ``wrong`` is mistaken for the next
    class of its organ (one prediction per diagnosis, like the LIMIT demo)."""
    rows = []
    for organ, classes in ORGANS.items():
        for k, label in enumerate(classes):
            for s in range(per_diagnosis):
                predicted = classes[(k + 1) % 3] if (organ, label) in wrong else label
                if rng is not None and rng.uniform() < 0.2:
                    predicted = classes[int(rng.integers(3))]
                rows.append((f"{organ}-{label}-{s}", organ, organ, label, organ, predicted))
    return rows


@pytest.mark.parametrize("report_organs", [None, 2])
def test_weighted_slides_give_the_organ_mean_of_the_table(report_organs):
    rows = _rows({("lung", "infarct")}, rng=np.random.default_rng(0))[:-7]  # unequal sizes
    table = score_zero_shot([rows], ORGANS, trials=0, report_organs=report_organs)
    correct = np.asarray([float(r[3] == r[5]) for r in rows])
    weight = slide_weights(rows, ORGANS, report_organs=report_organs)
    assert weighted_accuracy(correct, weight) == pytest.approx(table["organ_mean"], abs=1e-12)


def test_slide_bootstrap_says_zero_where_the_diagnosis_bootstrap_does_not():
    # two of 12 diagnoses wholly wrong: resampling slides cannot move the figure at all
    rows = _rows({("breast", "mastitis"), ("kidney", "rcc")})
    groups = []
    for organ in ORGANS:
        mine = [r for r in rows if r[2] == organ]
        groups.append((np.asarray([r[3] for r in mine]), np.asarray([r[5] for r in mine])))
    slide_level = organ_mean_bootstrap(groups, trials=300, seed=0)
    assert np.std(slide_level) < 1e-12
    interval = diagnosis_interval(rows, ORGANS, n_resamples=300, seed=0)
    assert interval.value == pytest.approx(1 - 2 / 12)
    assert interval.n_units == 12 and interval.unit == "diagnosis"
    assert interval.std > 0.05 and interval.low < 0.7 and interval.high == 1.0


def test_paired_margin_is_the_difference_on_the_same_diagnoses():
    model = _rows({("breast", "mastitis")})
    baseline = _rows({("breast", "mastitis"), ("lung", "infarct"), ("colon", "colitis")})
    margin = paired_margin(model, baseline, ORGANS, n_resamples=300, seed=1)
    assert margin.difference == pytest.approx(2 / 12)
    assert margin.low >= 0.0 and margin.high <= 2 / 12 * 3  # never below 0: model never worse
    same = paired_margin(model, model, ORGANS, n_resamples=50)
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="same slides"):
        paired_margin(model, baseline[::-1], ORGANS)


def _slides(rng, centres, per_class: int, offset: int = 0) -> list[SlideExample]:
    slides = []
    for organ, classes in ORGANS.items():
        for label in classes:
            for s in range(per_class):
                patches = centres[(organ, label)] + 0.5 * rng.normal(size=(20, 8))
                slide_id = f"{organ}-{label}-{s + offset}"
                slides.append(SlideExample(torch.tensor(patches), organ, label, slide_id))
    return slides


def test_no_text_baselines_fit_on_train_and_choose_within_the_organ():
    rng = np.random.default_rng(3)
    centres = {(o, c): 3 * rng.normal(size=8) for o, cs in ORGANS.items() for c in cs}
    train, val, test = (_slides(rng, centres, n, i * 10) for i, n in enumerate((4, 2, 3)))
    vectors = slide_vectors(test[:2], "random", random_patches=3, seed=5)
    assert vectors.shape == (2, 8)
    assert np.allclose(vectors, slide_vectors(test[:2], "random", random_patches=3, seed=5))
    assert not np.allclose(vectors, slide_vectors(test[:2], "mean"))
    rows = nearest_centroid_rows(train, test, ORGANS, "mean")
    assert all(r[4] == r[2] for r in rows)  # the prediction is one of the slide's organ's options
    assert score_zero_shot([rows], ORGANS, trials=0)["organ_mean"] == 1.0
    probe, c = linear_probe_rows(train, val, test, ORGANS, "mean", c_grid=(0.01, 1.0))
    assert c in (0.01, 1.0)
    assert score_zero_shot([probe], ORGANS, trials=0)["organ_mean"] == 1.0
    _, default_c = linear_probe_rows(train, [], test, ORGANS, "random", c_grid=(0.01,))
    assert default_c == 1.0  # no validation slides: C = 1


def test_fresh_seeds_refuse_every_seed_spent_on_a_choice():
    from medvl_engine.evaluation.fresh_seeds import (
        FRESH_SEED_START,
        check_fresh,
        fresh_seeds,
    )

    assert fresh_seeds("limit", 3) == [FRESH_SEED_START + i for i in range(3)]
    for seed in (0, 10_000, 10_001):
        with pytest.raises(ConfigError, match=f"seed {seed} cannot give a fresh limit cohort"):
            check_fresh("limit", [seed])
    with pytest.raises(ConfigError, match="this run's training, data or split seed"):
        fresh_seeds("limit", 2, start=41, run_seeds=[42])
    with pytest.raises(ConfigError) as error:
        check_fresh("limit", [FRESH_SEED_START, 0])
    assert str(error.value).count(".") == 1 and "900000 on" in str(error.value)
