"""Headline metrics of readout tables by row, their intervals over units, and the model's
margin over the best baseline by a paired bootstrap.

A readout table (:class:`~medvl_engine.tasks.topksiglip.evaluation.ReadoutTable`) keeps every
readout breast by breast; :func:`row_metric` turns one headline metric into a function of the
row indices ``[m]`` (numpy only, no copy of the table), so the bootstrap
(:mod:`medvl_engine.evaluation.bootstrap`) can resample the independent unit (a breast; an exam
when two breasts share one) thousands of times over pooled cohorts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from medvl_engine.evaluation.bootstrap import PairedDifference, UnitInterval, paired_bootstrap
from medvl_engine.evaluation.bootstrap import unit_bootstrap as _unit_bootstrap
from medvl_engine.evaluation.metrics import auroc, weighted_average_precision
from medvl_engine.tasks.topksiglip.evaluation import ReadoutTable

__all__ = [
    "HEADLINE_METRICS",
    "MARGIN_METRICS",
    "best_baseline",
    "difference_text",
    "headline_intervals",
    "interval_text",
    "margins_over_best",
    "per_metric",
    "row_metric",
    "unit_name",
]

HEADLINE_METRICS = (
    "auroc_cancer",
    "auroc_birads_avg",
    "auroc_findings_avg",
    "auroc_density_avg",
    "pointing_game",
    "pixel_ap",
)
"""Metrics of the baseline block and the fresh-cohort report, in print order."""
MARGIN_METRICS = ("auroc_cancer", "auroc_birads_avg", "pointing_game")
"""Metrics whose margin over the best baseline is bootstrapped (paired, over units)."""

T = TypeVar("T")


def unit_name(units: np.ndarray) -> str:
    """``"breast"`` when every row has its own unit id, else ``"exam"`` (the breasts of one
    exam are resampled together)."""
    return "breast" if len(np.unique(units)) == len(units) else "exam"


def _column_auroc(table: ReadoutTable, key: str, rows: np.ndarray) -> float:
    known = table.known[key][rows]
    return auroc(table.truth[key][rows][known], table.scores[key][rows][known])


def row_metric(table: ReadoutTable, key: str) -> Callable[[np.ndarray], float] | None:
    """``metric(rows)``: metric ``key`` of the breasts ``rows [m]`` (repeats allowed) of the
    table; ValueError when undefined on those rows, None when the table cannot give it.

    * ``auroc_<readout>``: AUROC over the rows with a label;
    * a group (``auroc_birads_avg``, ...): mean of its members' AUROCs defined on the rows;
    * ``pointing_game``: mean hit over the rows with an ROI;
    * ``pixel_ap``: weighted AP of the pooled candidate cells of the rows with an ROI.
    """
    if key in table.groups:
        members = [m for m in table.groups[key] if m in table.scores]
        if not members:
            return None

        def group(rows: np.ndarray) -> float:
            values = []
            for member in members:
                try:
                    values.append(_column_auroc(table, member, rows))
                except ValueError:
                    continue
            if not values:
                raise ValueError(f"{key} is undefined on these breasts")
            return float(np.mean(values))

        return group
    if key in table.scores:
        return lambda rows: _column_auroc(table, key, rows)
    roi = ~np.isnan(table.hits)
    if key == "pointing_game":
        if not roi.any():
            return None

        def pointing(rows: np.ndarray) -> float:
            hits = table.hits[rows]
            hits = hits[~np.isnan(hits)]
            if not hits.size:
                raise ValueError("no breast with an ROI")
            return float(hits.mean())

        return pointing
    if key == "pixel_ap":
        picked = np.flatnonzero(roi)
        if not picked.size or not len(table.cell_scores[picked[0]]):
            return None
        # one row of cells per breast (every breast has G * G cells); zeros off the ROI rows
        width = len(table.cell_scores[picked[0]])
        cells = np.zeros((3, len(table), width))
        for i in picked:
            cells[:, i] = (table.cell_scores[i], table.cell_positive[i], table.cell_negative[i])

        def pixel_ap(rows: np.ndarray) -> float:
            rows = rows[roi[rows]]
            scores, positive, negative = (c[rows].ravel() for c in cells)
            return weighted_average_precision(scores, positive, negative)

        return pixel_ap
    return None


def per_metric(
    table: ReadoutTable,
    keys: Sequence[str],
    compute: Callable[[Callable[[np.ndarray], float]], T],
) -> dict[str, T]:
    """``{key: compute(metric)}`` for each metric ``key`` the table gives (:func:`row_metric`
    not None), leaving out those where ``compute`` raises ValueError (undefined)."""
    result = {}
    for key in keys:
        metric = row_metric(table, key)
        if metric is None:
            continue
        try:
            result[key] = compute(metric)
        except ValueError:
            continue
    return result


def headline_intervals(
    table: ReadoutTable,
    units: np.ndarray,
    keys: tuple[str, ...] = HEADLINE_METRICS,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, UnitInterval]:
    """``{key: interval}`` of the metrics ``keys`` the table gives, each a percentile
    bootstrap over ``units [n]`` (one id per row; rows sharing an id resampled together)."""
    rows = np.arange(len(table))
    bootstrap = _bootstrap_settings(units, n_resamples, seed, level)
    return per_metric(table, keys, lambda metric: _unit_bootstrap(metric, rows, **bootstrap))


def _bootstrap_settings(
    units: np.ndarray, n_resamples: int, seed: int, level: float
) -> dict[str, Any]:
    """The bootstrap's arguments shared by the intervals and the margins: resample ``units``
    (named by :func:`unit_name`) ``n_resamples`` times from ``seed`` at ``level``."""
    return {
        "units": units,
        "unit": unit_name(units),
        "n_resamples": n_resamples,
        "seed": seed,
        "level": level,
    }


def best_baseline(values: Mapping[str, Mapping[str, float]], key: str) -> tuple[str, float] | None:
    """``(reader, value)`` of the baseline reader with the highest point value of ``key``
    (``values``: ``{reader: {metric: value}}``), None when no reader gives it."""
    found = [(v[key], reader) for reader, v in values.items() if key in v]
    if not found:
        return None
    value, reader = max(found)
    return reader, float(value)


def margins_over_best(
    model: ReadoutTable,
    baselines: Mapping[str, ReadoutTable],
    units: np.ndarray,
    keys: tuple[str, ...] = MARGIN_METRICS,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, tuple[str, PairedDifference]]:
    """``{key: (best reader, paired difference)}``: the model minus the baseline reader with the
    best point value of ``key`` on these breasts (the choice flatters the baseline), its
    interval from a paired bootstrap over ``units [n]`` (both scored on the same resampled
    units in every trial)."""
    rows = np.arange(len(model))
    result = {}
    for key in keys:
        metric = row_metric(model, key)
        if metric is None:
            continue
        points: dict[str, dict[str, float]] = {}
        functions = {}
        for reader, table in baselines.items():
            other = row_metric(table, key)
            if other is None:
                continue
            try:
                points[reader] = {key: other(rows)}
            except ValueError:
                continue
            functions[reader] = other
        best = best_baseline(points, key)
        if best is None:
            continue
        try:
            difference = paired_bootstrap(
                metric,
                (rows,),
                (rows,),
                baseline_metric=functions[best[0]],
                **_bootstrap_settings(units, n_resamples, seed, level),
            )
        except ValueError:
            continue
        result[key] = (best[0], difference)
    return result


def interval_text(record: Mapping[str, Any] | None) -> str:
    """An interval record (``{"value", "low", "high"}`` as the JSON-ready blocks store it) as
    ``"v [low, high]"`` to 3 decimals; ``"v"`` without an interval, ``"-"`` without a value."""
    if not record or record.get("value") is None:
        return "-"
    if record.get("low") is None:
        return f"{record['value']:.3f}"
    return f"{record['value']:.3f} [{record['low']:.3f}, {record['high']:.3f}]"


def difference_text(record: Mapping[str, Any]) -> str:
    """A paired-difference record (``{"difference", "low", "high"}``) as ``"+d [+low, +high]"``
    to 3 signed decimals; ``"+d"`` without an interval."""
    if record.get("low") is None:
        return f"{record['difference']:+.3f}"
    return f"{record['difference']:+.3f} [{record['low']:+.3f}, {record['high']:+.3f}]"
