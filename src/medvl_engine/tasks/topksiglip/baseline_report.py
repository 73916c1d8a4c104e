"""The baseline block of every TopKSigLIP evaluation: each reviewer's baseline
(:mod:`~medvl_engine.tasks.topksiglip.baselines`) beside the model on the headline metrics,
and the model's margin over the best baseline with a paired bootstrap over the independent unit.

:func:`score_baselines` reads a set of breasts with every baseline; :func:`baseline_block`
bootstraps the model and baselines there and returns a JSON-ready dict that
:func:`print_baseline_block` prints. :func:`pool_cohorts` joins the tables of several
cohorts (fresh cohorts) so the block can be made on the pooled breasts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.tasks.topksiglip.baselines import (
    BASELINE_READERS,
    BreastInputs,
    logistic_reader,
    untrained_readers,
)
from medvl_engine.tasks.topksiglip.evaluation import ReadoutTable
from medvl_engine.tasks.topksiglip.margins import (
    HEADLINE_METRICS,
    MARGIN_METRICS,
    difference_text,
    headline_intervals,
    interval_text,
    margins_over_best,
    per_metric,
    unit_name,
)

__all__ = [
    "ScoredBreasts",
    "baseline_block",
    "point_metrics",
    "pool_cohorts",
    "print_baseline_block",
    "score_baselines",
]


@dataclass
class ScoredBreasts:
    """One set of breasts read by every baseline: ``tables {reader: table}``, ``chosen
    {reader: {readout: statistic or C}}`` and ``units [n]`` (unit id per breast)."""

    tables: dict[str, ReadoutTable]
    chosen: dict[str, dict[str, str]]
    units: np.ndarray


def score_baselines(
    inputs: BreastInputs,
    geometry: PatchGeometry,
    train: BreastInputs | None,
    validation: BreastInputs | None,
) -> ScoredBreasts:
    """Every baseline on ``inputs``: the untrained readers, and the logistic regression when
    ``train`` (the training split's inputs) is given."""
    readers = untrained_readers(inputs, geometry)
    if train is not None:
        readers["logistic"] = logistic_reader(train, validation, inputs)
    return ScoredBreasts(
        tables={name: table for name, (table, _) in readers.items()},
        chosen={name: chosen for name, (_, chosen) in readers.items()},
        units=inputs.units,
    )


def point_metrics(table: ReadoutTable, keys: Sequence[str] = HEADLINE_METRICS) -> dict[str, float]:
    """``{key: value}`` of the headline metrics the table gives on all its breasts."""
    rows = np.arange(len(table))
    return per_metric(table, keys, lambda metric: float(metric(rows)))


def _common(tables: Sequence[ReadoutTable]) -> list[ReadoutTable]:
    """The tables restricted to the score columns (and groups) they all have."""
    keys = set.intersection(*(set(t.scores) for t in tables))
    trimmed = []
    for t in tables:
        groups = {g: [m for m in members if m in keys] for g, members in t.groups.items()}
        trimmed.append(
            ReadoutTable(
                scores={k: t.scores[k] for k in sorted(keys)},
                truth={k: t.truth[k] for k in sorted(keys)},
                known={k: t.known[k] for k in sorted(keys)},
                groups={g: m for g, m in groups.items() if m},
                hits=t.hits,
                chance=t.chance,
                cell_scores=t.cell_scores,
                cell_positive=t.cell_positive,
                cell_negative=t.cell_negative,
            )
        )
    return trimmed


def pool_cohorts(tables: Sequence[ReadoutTable]) -> ReadoutTable:
    """One table of the breasts of every cohort, in order (the columns all cohorts have)."""
    return ReadoutTable.concat(_common(tables))


def _interval(value: Any) -> dict[str, Any]:
    record = value.as_dict()
    return {
        k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in record.items()
    }


def baseline_block(
    models: Sequence[tuple[str, ReadoutTable]],
    baselines: ScoredBreasts,
    n_resamples: int,
    seed: int,
    level: float,
) -> dict[str, Any]:
    """JSON-ready block: per model and baseline reader the headline metrics with intervals over
    the units, each model's paired margin over the best baseline (:data:`MARGIN_METRICS`), the
    unit and how many."""
    units = baselines.units
    readers = {}
    for name, table in baselines.tables.items():
        intervals = headline_intervals(
            table, units, n_resamples=n_resamples, seed=seed, level=level
        )
        readers[name] = {
            "reads": BASELINE_READERS[name],
            "metrics": {key: _interval(v) for key, v in intervals.items()},
            "chosen": {k: v for k, v in baselines.chosen[name].items() if k in HEADLINE_METRICS},
        }
    entries = []
    for label, table in models:
        intervals = headline_intervals(
            table, units, n_resamples=n_resamples, seed=seed, level=level
        )
        margins = margins_over_best(
            table, baselines.tables, units, MARGIN_METRICS, n_resamples, seed, level
        )
        entries.append(
            {
                "model": label,
                "metrics": {key: _interval(v) for key, v in intervals.items()},
                "margins": {
                    key: {**_interval(difference), "best_baseline": reader}
                    for key, (reader, difference) in margins.items()
                },
            }
        )
    return {
        "unit": unit_name(units),
        "units": int(len(np.unique(units))),
        "breasts": int(len(units)),
        "level": level,
        "bootstrap_resamples": n_resamples,
        "readers": readers,
        "models": entries,
    }


def print_baseline_block(block: Mapping[str, Any], title: str) -> None:
    """Print the block: a table of headline metrics (model(s), then each baseline reader), then
    one line per margin naming the best baseline and the bootstrap's unit."""
    unit, count = block["unit"], block["units"]
    plural = unit + ("es" if unit.endswith("x") else "s")
    print(
        f"{title}; value [{block['level']:.0%} bootstrap interval over {count} {plural}]; the "
        "untrained readers choose statistic and sign per readout on these breasts (flattering "
        "them); logistic: fitted on the training split, C chosen on validation"
    )
    columns = (
        [entry["model"] for entry in block["models"]] if len(block["models"]) > 1 else ["model"]
    )
    columns += list(block["readers"])
    width = 24
    print("  " + f"{'metric':<22}" + "".join(f"{c[-(width - 2) :]:<{width}}" for c in columns))
    for key in HEADLINE_METRICS:
        cells = [interval_text(entry["metrics"].get(key)) for entry in block["models"]]
        cells += [interval_text(r["metrics"].get(key)) for r in block["readers"].values()]
        if all(c == "-" for c in cells):
            continue
        print("  " + f"{key:<22}" + "".join(f"{c:<{width}}" for c in cells))
    for name, reader in block["readers"].items():
        print(f"  {name}: {reader['reads']}")
    for entry in block["models"]:
        who = "" if len(block["models"]) == 1 else f" ({entry['model']})"
        for key, margin in entry["margins"].items():
            print(
                f"  margin{who} {key}: model - best baseline ({margin['best_baseline']}) = "
                f"{difference_text(margin)} (paired bootstrap over {count} {plural})"
            )
