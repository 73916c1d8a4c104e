"""Uncertainty at the independent unit of a zero-shot slide evaluation: the diagnosis.

A zero-shot prediction is a choice among the prompts of a slide's organ, one prompt per
diagnosis; slides of one diagnosis share its prompt and, on synthetic cohorts, look alike, so
they are not independent evidence (on the LIMIT demo every slide of a diagnosis gets the same
prediction). The bootstrap therefore resamples DIAGNOSES, the (organ, class) pairs, each with
all its slides (a clustered bootstrap, :mod:`medvl_engine.evaluation.bootstrap`).

The organ-mean balanced accuracy is written as a weighted mean over slides,
``BA = sum_i w_i [y_i = yhat_i] / sum_i w_i`` with ``w_i = W_c / (K_c n_d)`` for slide ``i`` of
diagnosis ``d`` in category ``c`` (``W_c`` the category's weight in the table mean,
:func:`~.scoring.table_weights`; ``K_c`` its diagnoses present; ``n_d`` the slides of ``d``);
on the full set it equals :func:`~.scoring.score_zero_shot`'s organ mean exactly, and in a
resample a diagnosis drawn twice counts twice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from medvl_engine.evaluation.bootstrap import (
    PairedDifference,
    UnitInterval,
    paired_bootstrap,
    unit_bootstrap,
)
from medvl_engine.tasks.limit.evaluation.scoring import (
    SINGLE_LABEL_GROUP,
    PredictionRow,
    choice_categories,
    table_weights,
)

__all__ = [
    "UNIT",
    "diagnosis_interval",
    "diagnosis_units",
    "paired_margin",
    "slide_weights",
    "weighted_accuracy",
]

UNIT = "diagnosis"


def diagnosis_units(rows: Sequence[PredictionRow]) -> np.ndarray:
    """The unit of every row, ``"organ/class"`` of its true diagnosis, ``[n]``."""
    return np.asarray([f"{row[2]}/{row[3]}" for row in rows], dtype=object)


def _correct(rows: Sequence[PredictionRow]) -> np.ndarray:
    return np.asarray([float(row[2] == row[4] and row[3] == row[5]) for row in rows])


def slide_weights(
    rows: Sequence[PredictionRow],
    classes_by_organ: Mapping[str, Sequence[str]],
    *,
    report_organs: int | None = None,
    group_single_label: bool = True,
) -> np.ndarray:
    """``w_i = W_c / (K_c n_d)`` of every row (module doc), ``[n]``; 0 in one-choice categories."""
    categories = choice_categories(classes_by_organ, group_single_label, SINGLE_LABEL_GROUP)
    choices = {name: len(options) for name, options in categories.items()}
    units = diagnosis_units(rows)
    slides_of = {u: int(np.sum(units == u)) for u in set(units.tolist())}
    diagnoses: dict[str, set[str]] = {}
    sizes: dict[str, int] = {}
    for row, unit in zip(rows, units, strict=True):
        if choices.get(row[1], 0) > 1:
            diagnoses.setdefault(row[1], set()).add(unit)
            sizes[row[1]] = sizes.get(row[1], 0) + 1
    if not sizes:
        raise ValueError("no category has two or more choices; zero-shot needs a choice to make")
    _, weights = table_weights(sizes, report_organs, SINGLE_LABEL_GROUP)
    return np.asarray(
        [
            weights[row[1]] / (len(diagnoses[row[1]]) * slides_of[unit]) if row[1] in sizes else 0.0
            for row, unit in zip(rows, units, strict=True)
        ]
    )


def weighted_accuracy(correct: np.ndarray, weight: np.ndarray) -> float:
    """``sum_i w_i c_i / sum_i w_i`` over rows ``[n]`` (the organ-mean BA, module doc)."""
    total = math.fsum(weight.tolist())  # exactly rounded sums: all correct gives exactly 1
    if total <= 0:
        raise ValueError("no weighted slide in this resample")
    return math.fsum((weight * correct).tolist()) / total


def diagnosis_interval(
    rows: Sequence[PredictionRow],
    classes_by_organ: Mapping[str, Sequence[str]],
    *,
    report_organs: int | None = None,
    group_single_label: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
) -> UnitInterval:
    """Organ-mean balanced accuracy with its 95% interval, bootstrapping diagnoses."""
    weight = slide_weights(
        rows, classes_by_organ, report_organs=report_organs, group_single_label=group_single_label
    )
    return unit_bootstrap(
        weighted_accuracy,
        _correct(rows),
        weight,
        units=diagnosis_units(rows),
        unit=UNIT,
        n_resamples=n_resamples,
        seed=seed,
    )


def paired_margin(
    model: Sequence[PredictionRow],
    baseline: Sequence[PredictionRow],
    classes_by_organ: Mapping[str, Sequence[str]],
    *,
    report_organs: int | None = None,
    group_single_label: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
) -> PairedDifference:
    """``BA(model) - BA(baseline)`` on the same slides, paired bootstrap over diagnoses.

    ``model`` and ``baseline`` are prediction rows of the same slides in the same order.
    """
    if [r[0] for r in model] != [r[0] for r in baseline] or len(model) != len(baseline):
        raise ValueError("a paired comparison needs the rows of the same slides in the same order")
    weight = slide_weights(
        model, classes_by_organ, report_organs=report_organs, group_single_label=group_single_label
    )
    return paired_bootstrap(
        weighted_accuracy,
        (_correct(model), weight),
        (_correct(baseline), weight),
        units=diagnosis_units(model),
        unit=UNIT,
        n_resamples=n_resamples,
        seed=seed,
    )
