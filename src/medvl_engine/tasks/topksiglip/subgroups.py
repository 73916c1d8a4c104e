"""Cancer AUROC by finding type: which cancers a reader finds, and which benign findings it
mistakes for cancer (the stratified readout of screening studies).

From a :class:`~medvl_engine.tasks.topksiglip.evaluation.ReadoutTable` with the cancer column
(``auroc_cancer``) and the finding columns (``auroc_<finding>``, which give each breast's
findings as labels), new columns that reuse the cancer score over a subset of the breasts:

* ``auroc_cancer:with_<finding>``: the cancers showing that finding vs every breast without
  cancer (how well cancers of that kind are found);
* ``auroc_cancer:vs_benign_<finding>``: every cancer vs the breasts without cancer that show
  that finding (how often a benign finding of that kind is taken for cancer);
* ``auroc_cancer:vs_normal``: every cancer vs the breasts with no finding at all.

A breast enters a column only where its cancer and finding labels are both known. The columns
take part in :func:`~medvl_engine.tasks.topksiglip.evaluation.readout_metrics` and its bootstrap
like any other (a resample with one class only leaves the column out).
"""

from __future__ import annotations

import numpy as np

from medvl_engine.data.mammo_reports import FINDING_TYPES
from medvl_engine.tasks.topksiglip.evaluation import ReadoutTable

__all__ = ["CANCER_KEY", "SUBGROUP_SEPARATOR", "subgroup_counts", "with_cancer_subgroups"]

CANCER_KEY = "auroc_cancer"
SUBGROUP_SEPARATOR = ":"


def _finding_key(kind: str) -> str:
    return f"auroc_{kind.replace(' ', '_')}"


def _subgroup_masks(table: ReadoutTable) -> dict[str, np.ndarray]:
    """``{column: [n] bool}``: the breasts each subgroup column is scored over."""
    cancer = np.asarray(table.truth[CANCER_KEY], dtype=bool)
    labelled = np.asarray(table.known[CANCER_KEY], dtype=bool).copy()
    shows: dict[str, np.ndarray] = {}
    for kind in FINDING_TYPES:
        key = _finding_key(kind)
        if key not in table.truth:
            continue
        labelled &= np.asarray(table.known[key], dtype=bool)
        shows[kind.replace(" ", "_")] = np.asarray(table.truth[key], dtype=bool)
    masks: dict[str, np.ndarray] = {}
    for name, has in shows.items():
        masks[f"{CANCER_KEY}{SUBGROUP_SEPARATOR}with_{name}"] = labelled & (~cancer | has)
        masks[f"{CANCER_KEY}{SUBGROUP_SEPARATOR}vs_benign_{name}"] = labelled & (cancer | has)
    if shows:
        no_finding = ~np.any(np.stack(list(shows.values())), axis=0)
        masks[f"{CANCER_KEY}{SUBGROUP_SEPARATOR}vs_normal"] = labelled & (cancer | no_finding)
    return masks


def with_cancer_subgroups(table: ReadoutTable) -> ReadoutTable:
    """``table`` with the cancer-by-finding columns added (none without a cancer column)."""
    if CANCER_KEY not in table.scores:
        return table
    cancer = np.asarray(table.truth[CANCER_KEY], dtype=bool)
    score = table.scores[CANCER_KEY]
    masks = _subgroup_masks(table)
    return table.with_scores(
        {key: score for key in masks},
        {key: cancer for key in masks},
        masks,
    )


def subgroup_counts(table: ReadoutTable) -> dict[str, tuple[int, int]]:
    """``{column: (cancers, breasts without cancer)}`` of each subgroup column of ``table``."""
    counts = {}
    for key, known in table.known.items():
        if SUBGROUP_SEPARATOR not in key or not key.startswith(CANCER_KEY):
            continue
        cancer = np.asarray(table.truth[key], dtype=bool)
        known = np.asarray(known, dtype=bool)
        counts[key] = (int((cancer & known).sum()), int((~cancer & known).sum()))
    return counts
