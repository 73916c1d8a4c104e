"""Cancer AUROC by finding type: the columns score the right breasts and bootstrap like others."""

from __future__ import annotations

import numpy as np
import pytest

from medvl_engine.evaluation.metrics import auroc
from medvl_engine.tasks.topksiglip.evaluation import (
    ReadoutTable,
    bootstrap_readouts,
    readout_metrics,
)
from medvl_engine.tasks.topksiglip.subgroups import subgroup_counts, with_cancer_subgroups

KINDS = ("mass", "calcification", "architectural_distortion", "asymmetry")

# Ten breasts: (cancer, findings, cancer score). Breast 9's findings are unknown.
BREASTS = [
    (True, {"mass"}, 0.9),
    (True, {"calcification"}, 0.4),
    (True, {"calcification", "mass"}, 0.7),
    (False, set(), 0.1),
    (False, set(), 0.3),
    (False, {"calcification"}, 0.6),
    (False, {"calcification"}, 0.2),
    (False, {"mass"}, 0.5),
    (True, {"architectural_distortion"}, 0.8),
    (False, set(), 0.95),
]


def _table() -> ReadoutTable:
    count = len(BREASTS)
    cancer = np.array([b[0] for b in BREASTS])
    scores = {"auroc_cancer": np.array([b[2] for b in BREASTS])}
    truth = {"auroc_cancer": cancer}
    known = {"auroc_cancer": np.ones(count, dtype=bool)}
    findings_known = np.arange(count) != 9
    for kind in KINDS:
        key = f"auroc_{kind}"
        truth[key] = np.array([kind in b[1] for b in BREASTS])
        known[key] = findings_known
        scores[key] = np.linspace(0.0, 1.0, count)
    empty = [np.zeros(0)] * count
    return ReadoutTable(
        scores=scores,
        truth=truth,
        known=known,
        groups={},
        hits=np.full(count, np.nan),
        chance=np.full(count, np.nan),
        cell_scores=empty,
        cell_positive=empty,
        cell_negative=empty,
    )


def _expected(positive_rows: list[int], negative_rows: list[int]) -> float:
    rows = positive_rows + negative_rows
    labels = np.array([True] * len(positive_rows) + [False] * len(negative_rows))
    return auroc(labels, np.array([BREASTS[i][2] for i in rows]))


def test_each_column_scores_its_cancers_against_its_breasts_without_cancer():
    metrics = readout_metrics(with_cancer_subgroups(_table()))
    without_cancer = [3, 4, 5, 6, 7]  # breast 9 has no finding labels: left out of every column
    assert metrics["auroc_cancer:with_calcification"] == pytest.approx(
        _expected([1, 2], without_cancer)
    )
    assert metrics["auroc_cancer:with_mass"] == pytest.approx(_expected([0, 2], without_cancer))
    assert metrics["auroc_cancer:vs_benign_calcification"] == pytest.approx(
        _expected([0, 1, 2, 8], [5, 6])
    )
    assert metrics["auroc_cancer:vs_normal"] == pytest.approx(_expected([0, 1, 2, 8], [3, 4]))
    # a benign calcification scored 0.6 outranks the calcification cancer scored 0.4
    assert metrics["auroc_cancer:vs_benign_calcification"] == pytest.approx(7 / 8)
    # no asymmetry among the breasts without cancer: that column is undefined and left out
    assert "auroc_cancer:vs_benign_asymmetry" not in metrics
    assert "auroc_cancer:with_asymmetry" not in metrics
    # the whole-cohort cancer AUROC is unchanged and still counts breast 9
    assert metrics["auroc_cancer"] == pytest.approx(readout_metrics(_table())["auroc_cancer"])


def test_counts_name_the_breasts_of_each_column():
    counts = subgroup_counts(with_cancer_subgroups(_table()))
    assert counts["auroc_cancer:with_calcification"] == (2, 5)
    assert counts["auroc_cancer:vs_benign_mass"] == (4, 1)
    assert counts["auroc_cancer:vs_normal"] == (4, 2)
    assert counts["auroc_cancer:with_asymmetry"] == (0, 5)
    assert "auroc_cancer" not in counts


def test_subgroup_columns_get_bootstrap_intervals_and_a_table_without_cancer_is_unchanged():
    table = with_cancer_subgroups(_table())
    intervals = bootstrap_readouts(table, n_resamples=50, seed=0)
    point, low, high, _ = intervals["auroc_cancer:vs_normal"]
    assert low <= point <= high
    no_cancer = _table()
    for column in (no_cancer.scores, no_cancer.truth, no_cancer.known):
        del column["auroc_cancer"]
    assert with_cancer_subgroups(no_cancer) is no_cancer
