"""The fresh-cohort report of ``medvl-train topksiglip eval``: N new synthetic cohorts
(:mod:`~medvl_engine.tasks.topksiglip.fresh`) scored by each model and every baseline, pooled.

Per cohort: the headline metrics of each model and baseline reader (the seed spread: per-cohort
values, min, max, std). Pooled over all cohorts: the headline metrics with a bootstrap interval
over the pooled breasts and the model's margin over the best baseline by a paired bootstrap
(:func:`~medvl_engine.tasks.topksiglip.baseline_report.baseline_block`). The untrained readers
choose their statistic per cohort on that cohort's breasts; the logistic baseline is the one
fitted on the training split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.tasks.topksiglip.baseline_report import (
    ScoredBreasts,
    baseline_block,
    point_metrics,
    pool_cohorts,
    print_baseline_block,
    score_baselines,
)
from medvl_engine.tasks.topksiglip.margins import HEADLINE_METRICS
from medvl_engine.training.seeds import seed_spread

if TYPE_CHECKING:
    from medvl_engine.models.topksiglip import TopKSigLIP
    from medvl_engine.tasks.topksiglip.baselines import BreastInputs
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.training.config import RunConfig

__all__ = ["evaluate_fresh_cohorts", "print_fresh_report", "seed_spread"]


def evaluate_fresh_cohorts(
    models: Sequence[tuple[str, TopKSigLIP]],
    seeds: Sequence[int],
    task_config: TopKSigLIPTaskConfig,
    run_config: RunConfig,
    fitted: tuple[BreastInputs, BreastInputs | None] | None,
    level: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Score ``models`` (label, model) and every baseline on the fresh cohorts ``seeds``;
    return the JSON-ready report (``fitted``: the training and validation inputs of the
    logistic baseline, None to leave it out)."""
    from medvl_engine.tasks.topksiglip.baselines import breast_inputs
    from medvl_engine.tasks.topksiglip.evaluation import model_readouts
    from medvl_engine.tasks.topksiglip.fresh import fresh_cohort_dataset

    geometry = task_config.geometry()
    model_tables: dict[str, list[Any]] = {label: [] for label, _ in models}
    reader_tables: dict[str, list[Any]] = {}
    chosen: list[dict[str, dict[str, str]]] = []
    units: list[np.ndarray] = []
    per_cohort: dict[str, dict[str, list[float | None]]] = {}
    for number, seed in enumerate(seeds, start=1):
        progress(f"fresh cohort {number}/{len(seeds)} (seed {seed}): writing / reading breasts")
        dataset = fresh_cohort_dataset(task_config, run_config, seed, geometry)
        inputs = breast_inputs(dataset, geometry)
        scored = score_baselines(inputs, geometry, *(fitted or (None, None)))
        units.append(np.asarray([f"{seed}:{u}" for u in inputs.units]))
        chosen.append(scored.chosen)
        tables: dict[str, Any] = dict(scored.tables)
        for name, table in scored.tables.items():
            reader_tables.setdefault(name, []).append(table)
        for label, model in models:
            progress(f"fresh cohort {number}/{len(seeds)}: scoring {label}")
            table, _ = model_readouts(model, dataset, k=task_config.eval_k)
            model_tables[label].append(table)
            tables[label] = table
        for name, table in tables.items():
            points = point_metrics(table)
            column = per_cohort.setdefault(name, {key: [] for key in HEADLINE_METRICS})
            for key in HEADLINE_METRICS:
                column[key].append(points.get(key))
    pooled = ScoredBreasts(
        tables={name: pool_cohorts(parts) for name, parts in reader_tables.items()},
        chosen={name: {} for name in reader_tables},
        units=np.concatenate(units),
    )
    progress(f"pooled bootstrap over {len(pooled.units)} fresh breasts")
    block = baseline_block(
        [(label, pool_cohorts(parts)) for label, parts in model_tables.items()],
        pooled,
        task_config.bootstrap_resamples,
        task_config.seed,
        level,
    )
    spread: dict[str, dict[str, dict[str, float]]] = {}
    for name, column in per_cohort.items():
        for key, values in column.items():
            defined = [v for v in values if v is not None]
            if defined:
                spread.setdefault(name, {})[key] = seed_spread(defined)
    margins_by_cohort: dict[str, dict[str, list[float]]] = {}
    for entry in block["models"]:
        for key, margin in entry["margins"].items():
            own, other = per_cohort[entry["model"]][key], per_cohort[margin["best_baseline"]][key]
            margins_by_cohort.setdefault(entry["model"], {})[key] = [
                float(a - b)
                for a, b in zip(own, other, strict=True)
                if a is not None and b is not None
            ]
    return {
        "seeds": [int(s) for s in seeds],
        "cohort_size": int(task_config.fresh_cohort_size),
        "pooled": block,
        "per_cohort": per_cohort,
        "seed_spread": spread,
        "margin_by_cohort": margins_by_cohort,
        "chosen_by_cohort": chosen,
    }


def print_fresh_report(report: dict[str, Any]) -> None:
    """Print the pooled block and the seed spread of each model and its margins."""
    seeds = report["seeds"]
    print_baseline_block(
        report["pooled"],
        f"TopKSigLIP fresh cohorts (the headline): {len(seeds)} cohorts x "
        f"{report['cohort_size']} breasts, cohort seeds {seeds[0]}-{seeds[-1]} (never used for "
        "training, validation, the test split or any choice), pooled",
    )
    for entry in report["pooled"]["models"]:
        label = entry["model"]
        print(
            f"  seed spread of {label} over {len(seeds)} cohorts "
            "(per-cohort values; min / max / std):"
        )
        for key in HEADLINE_METRICS:
            values = report["per_cohort"].get(label, {}).get(key)
            if not values or any(v is None for v in values):
                continue
            s = report["seed_spread"][label][key]
            shown = " ".join(f"{v:.3f}" for v in values)
            print(f"    {key:<20} {shown}  ({s['min']:.3f} / {s['max']:.3f} / {s['std']:.3f})")
        for key, values in report["margin_by_cohort"].get(label, {}).items():
            if not values:
                continue
            s = seed_spread(values)
            baseline = entry["margins"][key]["best_baseline"]
            shown = " ".join(f"{v:+.3f}" for v in values)
            print(
                f"    margin {key} over {baseline}: {shown}  ({s['min']:+.3f} / {s['max']:+.3f} / "
                f"{s['std']:.3f})"
            )
