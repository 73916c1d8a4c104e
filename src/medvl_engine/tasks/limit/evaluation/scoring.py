"""Balanced-accuracy tables of zero-shot prediction rows (LIMIT App. A.2, Table 2).

The choices of a slide are the (organ, class) options of its category: an organ with two or
more classes is a category; organs with a single class are grouped into one
(:func:`choice_categories`). Balanced accuracy is computed per category; the overall score
is the mean of the table rows (:func:`table_weights`: the largest organs are rows, the rest
one "other" row) with a bootstrap that resamples slides within each category
(:func:`organ_mean_bootstrap`), or the balanced accuracy pooled over all slides.
:func:`score_zero_shot` turns prediction rows (:data:`PredictionRow`) into that report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from medvl_engine.evaluation.metrics import balanced_accuracy, bootstrap_std

__all__ = [
    "OTHER_ROW",
    "SINGLE_LABEL_GROUP",
    "Option",
    "PredictionRow",
    "choice_categories",
    "organ_mean_bootstrap",
    "score_zero_shot",
    "table_weights",
]

SINGLE_LABEL_GROUP = "single-label organs"
OTHER_ROW = "other"
Option = tuple[str, str]  # (organ, class)
PredictionRow = tuple[Any, ...]  # (slide_id, category, organ, label, pred. organ, pred. class)


def choice_categories(
    classes_by_organ: Mapping[str, Sequence[str]],
    group_single_label: bool = True,
    group_name: str = SINGLE_LABEL_GROUP,
) -> dict[str, list[Option]]:
    """The multiple-choice categories: category -> its options ``(organ, class)``.

    Each organ with two or more classes is its own category. With ``group_single_label``
    the organs that have a single class are merged into one category ``group_name`` whose
    choices are all their (organ, class) pairs (LIMIT App. A.2: TCGA-OT bladder, prostate,
    cervix and the rest); without it each stays a one-choice category.
    """
    categories: dict[str, list[Option]] = {}
    singles: list[Option] = []
    for organ, classes in classes_by_organ.items():
        options = [(organ, name) for name in dict.fromkeys(classes)]
        if group_single_label and len(options) == 1:
            singles.extend(options)
        elif options:
            categories[organ] = options
    if singles:
        if group_name in categories:
            raise ValueError(
                f"the group of single-label organs is named {group_name!r}, like an organ "
                "with several classes; choose another group name."
            )
        categories[group_name] = singles
    return categories


def table_weights(
    sizes: Mapping[str, int],
    report_organs: int | None,
    single_label_group: str = SINGLE_LABEL_GROUP,
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """The rows of the per-organ table and each category's weight in the overall mean.

    sizes: slides per category. With ``report_organs = N`` the N organs with the most
    slides (ties by name; never the group of single-label organs) are rows of their own
    and the rest are averaged into one row ``"other"`` (LIMIT App. A.2: 7 organs and
    "Other", macro-averaged); overall is the mean of the rows, so each category weighs
    ``1 / rows`` or ``1 / (rows * len(other))``. ``None``: every category is a row.
    Returns ``({row: [categories]}, {category: weight})``.
    """
    organs = sorted((c for c in sizes if c != single_label_group), key=lambda c: (-sizes[c], c))
    if report_organs is None:
        table = {c: [c] for c in sorted(sizes)}
    else:
        if report_organs < 0:
            raise ValueError(f"the number of organs to report must be >= 0, got {report_organs}")
        top = sorted(organs[:report_organs])
        rest = sorted(c for c in sizes if c not in top)
        if len(rest) == 1:
            top, rest = sorted([*top, *rest]), []
        table = {c: [c] for c in top}
        if rest:
            table[OTHER_ROW] = rest
    weights = {c: 1 / (len(table) * len(members)) for members in table.values() for c in members}
    return table, weights


def organ_mean_bootstrap(
    groups: Sequence[tuple[np.ndarray, np.ndarray]],
    trials: int = 1000,
    seed: int = 0,
    weights: Sequence[float] | None = None,
) -> np.ndarray:
    """Organ-mean balanced accuracy of ``trials`` resamples, ``[trials]``.

    groups: ``(labels, predictions)`` of each category; weights: each category's weight
    (default: equal). Slides are resampled with replacement within each category, so
    every resample keeps every category.
    """
    share = np.full(len(groups), 1 / len(groups)) if weights is None else np.asarray(weights)
    rng = np.random.default_rng(seed)
    values = np.empty(trials)
    for trial in range(trials):
        scores = []
        for labels, predictions in groups:
            rows = rng.integers(0, len(labels), size=len(labels))
            scores.append(balanced_accuracy(labels[rows], predictions[rows]))
        values[trial] = float(np.dot(share, scores))
    return values


def _key(option: Option) -> str:
    return f"{option[0]}/{option[1]}"


def _score_rows(
    rows: list[tuple[Any, ...]],
    choices: Mapping[str, int],
    trials: int,
    seed: int,
    report_organs: int | None,
    single_label_group: str,
) -> dict[str, Any]:
    """Per-category, table, organ-mean and pooled balanced accuracy of prediction rows."""
    per_organ: dict[str, dict[str, float]] = {}
    groups, names = [], []
    for category in sorted({row[1] for row in rows}):
        chosen = [row for row in rows if row[1] == category]
        y = np.asarray([_key((r[2], r[3])) for r in chosen], dtype=object)
        p = np.asarray([_key((r[4], r[5])) for r in chosen], dtype=object)
        per_organ[category] = {
            "balanced_accuracy": balanced_accuracy(y, p),
            "std": bootstrap_std(balanced_accuracy, y, p, trials=trials, seed=seed),
            "n": float(len(y)),
            "choices": float(choices[category]),
        }
        if choices[category] > 1:  # a one-choice category is right by construction
            groups.append((y, p))
            names.append(category)
    if not groups:
        raise ValueError("no category has two or more choices; zero-shot needs a choice to make")
    sizes = {name: len(y) for name, (y, _) in zip(names, groups, strict=True)}
    table, weights = table_weights(sizes, report_organs, single_label_group)
    accuracy = {name: per_organ[name]["balanced_accuracy"] for name in names}
    rows_of_table = {
        row: float(np.mean([accuracy[c] for c in members])) for row, members in table.items()
    }
    share = [weights[name] for name in names]
    values = organ_mean_bootstrap(groups, trials, seed, share)
    organ_mean = {
        "balanced_accuracy": float(np.mean(list(rows_of_table.values()))),
        "std": float(np.std(values)) if trials else float("nan"),
        "ci_low": float(np.percentile(values, 2.5)) if trials else float("nan"),
        "ci_high": float(np.percentile(values, 97.5)) if trials else float("nan"),
        "n": float(sum(len(y) for y, _ in groups)),
        "categories": float(len(groups)),
        "table": rows_of_table,
        "other": table.get(OTHER_ROW, []),
    }
    y = np.asarray([_key((r[2], r[3])) for r in rows], dtype=object)
    p = np.asarray([_key((r[4], r[5])) for r in rows], dtype=object)
    pooled = {
        "balanced_accuracy": balanced_accuracy(y, p),
        "std": bootstrap_std(balanced_accuracy, y, p, trials=trials, seed=seed),
        "n": float(len(y)),
    }
    return {"per_organ": per_organ, "organ_mean": organ_mean, "pooled": pooled}


def _over_trials(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over random-pooling trials of every balanced accuracy."""

    def summary(values: list[float], n: float, **extra: float) -> dict[str, Any]:
        return {
            "balanced_accuracy": float(np.mean(values)),
            "std": float(np.std(values)),
            "n": n,
            "trials": [float(v) for v in values],
            **extra,
        }

    first = results[0]
    per_organ = {
        category: summary(
            [r["per_organ"][category]["balanced_accuracy"] for r in results],
            value["n"],
            choices=value["choices"],
        )
        for category, value in first["per_organ"].items()
    }
    organ_mean = summary(
        [r["organ_mean"]["balanced_accuracy"] for r in results],
        first["organ_mean"]["n"],
        categories=first["organ_mean"]["categories"],
    )
    organ_mean["table"] = {
        row: float(np.mean([r["organ_mean"]["table"][row] for r in results]))
        for row in first["organ_mean"]["table"]
    }
    organ_mean["other"] = first["organ_mean"]["other"]
    pooled = summary([r["pooled"]["balanced_accuracy"] for r in results], first["pooled"]["n"])
    return {"per_organ": per_organ, "organ_mean": organ_mean, "pooled": pooled}


def score_zero_shot(
    trial_rows: Sequence[Sequence[PredictionRow]],
    classes_by_organ: Mapping[str, Sequence[str]],
    *,
    trials: int = 1000,
    seed: int = 0,
    overall: Literal["organ_mean", "pooled"] = "organ_mean",
    group_single_label: bool = True,
    single_label_group: str = SINGLE_LABEL_GROUP,
    report_organs: int | None = None,
) -> dict[str, Any]:
    """Balanced accuracies of prediction rows (:func:`zero_shot_predictions`), the dict of
    :func:`zero_shot_slides`. Several trials (random pooling): means over the trials and
    the std across them, no bootstrap."""
    if overall not in ("organ_mean", "pooled"):
        raise ValueError(f"overall must be 'organ_mean' or 'pooled', got {overall!r}")
    if not trial_rows:
        raise ValueError("random pooling needs at least one trial")
    categories = choice_categories(classes_by_organ, group_single_label, single_label_group)
    choices = {name: len(options) for name, options in categories.items()}
    bootstrap = 0 if len(trial_rows) > 1 else trials
    results = [
        _score_rows(list(rows), choices, bootstrap, seed, report_organs, single_label_group)
        for rows in trial_rows
    ]
    scored = _over_trials(results) if len(results) > 1 else results[0]
    chosen = dict(scored[overall], definition=overall)
    return {
        "per_organ": scored["per_organ"],
        "overall": chosen,
        "organ_mean": scored["organ_mean"]["balanced_accuracy"],
        "organ_mean_summary": scored["organ_mean"],
        "pooled": scored["pooled"],
        "categories": {
            name: [_key(o) for o in options]
            for name, options in categories.items()
            if name in scored["per_organ"]
        },
        "predictions": list(trial_rows[0]),
    }
