"""One evaluation of a set of slides: the model, its baselines, and intervals over diagnoses.

Rows (each a slide-level classifier scored on the same slides):

- zero-shot ``(text tower, pooling)``: the tuned tower with report-guided attention (the
  method, Eq. 5), the untuned tower (where training started), and mean pooling of each;
- no text (:mod:`.baselines`): nearest centroid and a linear probe on mean-pooled or
  random-pooled patch features, fitted on the training split (the probe's C on validation).

Every row gets its organ-mean balanced accuracy with a 95% interval bootstrapping diagnoses
(:mod:`.units`); the method's margin over the BEST other row (the highest figure on these
slides, the strictest comparison) and over the untuned tower (the gain of training) are
paired bootstraps over the same diagnoses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from medvl_engine.tasks.limit.evaluation.baselines import (
    BASELINE_POOLINGS,
    linear_probe_rows,
    nearest_centroid_rows,
)
from medvl_engine.tasks.limit.evaluation.scoring import PredictionRow, score_zero_shot
from medvl_engine.tasks.limit.evaluation.slides import SlideExample, zero_shot_predictions
from medvl_engine.tasks.limit.evaluation.units import (
    UNIT,
    diagnosis_interval,
    diagnosis_units,
    paired_margin,
)

if TYPE_CHECKING:
    from medvl_engine.models.limit import LimitModel

__all__ = [
    "METHOD_ROW",
    "UNTUNED_ROW",
    "ZERO_SHOT_ROWS",
    "EvalSettings",
    "baseline_rows",
    "same_prediction_per_unit",
    "score_rows",
    "zero_shot_rows",
]

# (text tower, pooling) of the zero-shot rows; the first is the method.
ZERO_SHOT_ROWS: tuple[tuple[str, str], ...] = (
    ("tuned", "report_guided"),
    ("untuned", "report_guided"),
    ("tuned", "mean"),
    ("untuned", "mean"),
)
METHOD_ROW = "tuned/report_guided"
UNTUNED_ROW = "untuned/report_guided"


class EvalSettings(TypedDict):
    """The protocol of one evaluation (from the task config and the run's seed)."""

    template: str  # zero-shot prompt, e.g. "{tissue} {class}"
    k: int  # top-k pooling's k (unused by the rows here)
    group_single_label: bool
    report_organs: int | None
    random_patches: int  # patches of the random-pooling baselines
    bootstrap: int  # resamples of every interval
    seed: int


def zero_shot_rows(
    models: Mapping[str, LimitModel],
    slides: Sequence[SlideExample],
    classes: Mapping[str, Sequence[str]],
    settings: EvalSettings,
) -> dict[str, list[PredictionRow]]:
    """Prediction rows of every zero-shot ``(tower, pooling)`` row on ``slides``."""
    rows = {}
    for tower, pooling in ZERO_SHOT_ROWS:
        model = models[tower]
        trial_rows = zero_shot_predictions(
            slides,
            classes,
            model.encode_texts,
            model.tau_attn,
            template=settings["template"],
            pooling=pooling,  # type: ignore[arg-type]
            k=settings["k"],
            seed=settings["seed"],
            group_single_label=settings["group_single_label"],
        )
        rows[f"{tower}/{pooling}"] = list(trial_rows[0])
    return rows


def baseline_rows(
    train: Sequence[SlideExample],
    val: Sequence[SlideExample],
    slides: Sequence[SlideExample],
    classes: Mapping[str, Sequence[str]],
    settings: EvalSettings,
) -> tuple[dict[str, list[PredictionRow]], dict[str, Any]]:
    """Prediction rows of the no-text baselines on ``slides`` and their fitted settings
    (the probe's chosen C per pooling); empty when training has under two labelled classes."""
    if len({(s.organ, s.label) for s in train}) < 2:
        return {}, {"skipped": "fewer than two labelled classes in the training split"}
    rows: dict[str, list[PredictionRow]] = {}
    fitted: dict[str, Any] = {"fitted_on": f"{len(train)} training slides", "C": {}}
    patches, seed = settings["random_patches"], settings["seed"]
    grouped = settings["group_single_label"]
    for pooling in BASELINE_POOLINGS:
        rows[f"nearest_centroid/{pooling}"] = nearest_centroid_rows(
            train,
            slides,
            classes,
            pooling,
            random_patches=patches,
            seed=seed,
            group_single_label=grouped,
        )
        probe, c = linear_probe_rows(
            train,
            val,
            slides,
            classes,
            pooling,
            random_patches=patches,
            seed=seed,
            group_single_label=grouped,
        )
        rows[f"linear_probe/{pooling}"] = probe
        fitted["C"][pooling] = c
    fitted["C_chosen_on"] = f"{len(val)} validation slides" if val else "none (C = 1)"
    return rows, fitted


def score_rows(
    rows: Mapping[str, Sequence[PredictionRow]],
    classes: Mapping[str, Sequence[str]],
    settings: EvalSettings,
) -> dict[str, Any]:
    """Figures of every row, the best baseline and the paired margins (module doc).

    Returns ``{"rows": {name: {"balanced_accuracy", "low", "high", "std", "per_organ"}},
    "unit", "units", "best_baseline", "margin_over_best", "gain_over_untuned"}``; intervals
    and margins bootstrap ``units`` diagnoses (``unit``).
    """
    organs, grouped = settings["report_organs"], settings["group_single_label"]
    resamples, seed = settings["bootstrap"], settings["seed"]

    def margin_of(model: Sequence[PredictionRow], other: Sequence[PredictionRow]) -> Any:
        return paired_margin(
            model,
            other,
            classes,
            report_organs=organs,
            group_single_label=grouped,
            n_resamples=resamples,
            seed=seed,
        )

    figures: dict[str, dict[str, Any]] = {}
    for name, predictions in rows.items():
        interval = diagnosis_interval(
            predictions,
            classes,
            report_organs=organs,
            group_single_label=grouped,
            n_resamples=resamples,
            seed=seed,
        )
        table = score_zero_shot(
            [predictions],
            classes,
            trials=0,
            group_single_label=settings["group_single_label"],
            report_organs=settings["report_organs"],
        )
        figures[name] = {
            "balanced_accuracy": interval.value,
            "low": interval.low,
            "high": interval.high,
            "std": interval.std,
            "per_organ": {
                organ: {"balanced_accuracy": row["balanced_accuracy"], "n": row["n"]}
                for organ, row in table["per_organ"].items()
            },
        }
    units = len(set(diagnosis_units(rows[METHOD_ROW]).tolist()))
    others = [name for name in rows if name != METHOD_ROW]
    best = max(others, key=lambda name: (figures[name]["balanced_accuracy"], name))
    margin = margin_of(rows[METHOD_ROW], rows[best])
    gain = margin_of(rows[METHOD_ROW], rows[UNTUNED_ROW])
    return {
        "rows": figures,
        "unit": UNIT,
        "units": units,
        "slides": len(rows[METHOD_ROW]),
        "best_baseline": best,
        "margin_over_best": margin.as_dict(),
        "gain_over_untuned": gain.as_dict(),
    }


def same_prediction_per_unit(rows: Sequence[PredictionRow]) -> float:
    """Share of diagnoses whose slides all get one prediction (1.0: the slides of a diagnosis
    carry no independent evidence, the reason the bootstrap resamples diagnoses)."""
    units = diagnosis_units(rows)
    predicted = np.asarray([f"{r[4]}/{r[5]}" for r in rows], dtype=object)
    names = sorted(set(units.tolist()))
    return float(np.mean([len(set(predicted[units == u].tolist())) == 1 for u in names]))
