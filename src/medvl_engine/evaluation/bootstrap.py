"""Bootstrap over the independent unit: intervals of one metric and paired model-vs-baseline
differences, resampling unit ids (a breast, a patient, a slide) rather than rows.

When several rows share a unit (two views of one breast, several slides of one patient) the
resample is clustered: ``m`` unit ids are drawn with replacement from the ``m`` distinct ids and
every row of each drawn unit enters, as often as its unit was drawn. With one row per unit this is
the ordinary case bootstrap.

Paired means both readers are scored on the *same* resampled rows in every trial, so the interval
is the one of the difference ``metric(model) - metric(baseline)`` and not of two independent
figures (which would be far too wide and ignore that both err on the same hard cases).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "PairedDifference",
    "UnitInterval",
    "paired_bootstrap",
    "resample_rows",
    "unit_bootstrap",
]


@dataclass(frozen=True)
class _Record:
    """What the interval records share: their fields as plain JSON-ready values."""

    def as_dict(self) -> dict[str, float | int | str]:
        """Plain JSON-ready values, in field order."""
        return asdict(self)


@dataclass(frozen=True)
class UnitInterval(_Record):
    """A metric with its percentile-bootstrap interval over ``n_units`` resampled units."""

    value: float
    low: float
    high: float
    std: float
    n_units: int
    unit: str
    n_resamples: int
    level: float

    def describe(self) -> str:
        """``0.812 [0.790, 0.833] (bootstrap over 400 breasts)``."""
        return _describe(self.value, self, ".3f", "bootstrap")


@dataclass(frozen=True)
class PairedDifference(_Record):
    """``difference = model - baseline`` with its paired-bootstrap interval over units."""

    model: float
    baseline: float
    difference: float
    low: float
    high: float
    std: float
    n_units: int
    unit: str
    n_resamples: int
    level: float

    def describe(self) -> str:
        """``+0.112 [+0.085, +0.140] (paired bootstrap over 400 breasts)``."""
        return _describe(self.difference, self, "+.3f", "paired bootstrap")


def _describe(center: float, record: UnitInterval | PairedDifference, spec: str, kind: str) -> str:
    """``center [low, high] (<kind> over <n_units> <units>)``, the figures formatted by ``spec``."""
    n_units = record.n_units
    return (
        f"{center:{spec}} [{record.low:{spec}}, {record.high:{spec}}] "
        f"({kind} over {n_units} {_plural(record.unit, n_units)})"
    )


def _plural(unit: str, count: int) -> str:
    if count == 1:
        return unit
    if unit.endswith("is"):  # diagnosis -> diagnoses
        return unit[:-2] + "es"
    if unit.endswith("s"):
        return unit
    return unit[:-1] + "ies" if unit.endswith("y") and unit[-2:-1] not in "aeiou" else unit + "s"


class _UnitIndex:
    """Rows grouped by unit id: ``order`` sorts rows by unit, ``starts`` / ``counts`` per unit."""

    def __init__(self, units: npt.ArrayLike | None, n_rows: int) -> None:
        if units is None:
            self.order = np.arange(n_rows)
            self.starts = np.arange(n_rows)
            self.counts = np.ones(n_rows, dtype=np.int64)
            return
        ids = np.asarray(units)
        if ids.ndim != 1 or len(ids) != n_rows:
            raise ValueError(f"units must be [n] with n = {n_rows} rows, got shape {ids.shape}")
        _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        self.order = np.argsort(inverse, kind="stable")
        self.counts = counts.astype(np.int64)
        self.starts = np.r_[0, np.cumsum(self.counts)[:-1]].astype(np.int64)

    @property
    def n_units(self) -> int:
        return len(self.counts)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        picked = rng.integers(0, self.n_units, size=self.n_units)
        counts = self.counts[picked]
        starts = self.starts[picked]
        # positions starts[j] + 0 .. counts[j] - 1 for every picked unit j, concatenated
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        return np.asarray(self.order[np.repeat(starts, counts) + offsets])


def resample_rows(units: npt.ArrayLike | None, n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices ``[n']`` of one clustered resample (``n' = n_rows`` when units are unique).

    ``units [n_rows]`` holds each row's unit id (any hashable numpy dtype) or is None (one unit
    per row). ``m`` distinct ids are drawn with replacement and all rows of each drawn id are
    returned, in unit order.
    """
    return _UnitIndex(units, n_rows).draw(rng)


def _column(values: npt.ArrayLike) -> np.ndarray:
    """An array indexable by row lists; ragged per-row data (box lists) become an object array."""
    if isinstance(values, np.ndarray):
        return values
    try:
        return np.asarray(values)
    except ValueError:
        rows = list(values)  # type: ignore[arg-type]
        column = np.empty(len(rows), dtype=object)
        for i, row in enumerate(rows):
            column[i] = row
        return column


def _columns(arrays: Sequence[npt.ArrayLike]) -> list[np.ndarray]:
    return [_column(a) for a in arrays]


def _check_rows(columns: Sequence[np.ndarray]) -> int:
    if not columns:
        raise ValueError("the bootstrap needs at least one array")
    count = len(columns[0])
    if any(len(c) != count for c in columns):
        raise ValueError("bootstrap arrays must have the same length")
    if count == 0:
        raise ValueError("bootstrap of an empty set is undefined")
    return count


def _resample(
    index: _UnitIndex,
    score: Callable[[np.ndarray], float],
    n_resamples: int,
    seed: int,
    level: float,
) -> tuple[float, float, float]:
    """``(low, high, std)`` of ``score(rows)`` over ``n_resamples`` clustered resamples.

    The resamples are drawn in order from one ``default_rng(seed)`` (:meth:`_UnitIndex.draw`,
    rows ``[n']``); one on which ``score`` raises ``ValueError`` (the metric is undefined) is
    skipped, its draw spent all the same. ``low`` / ``high`` are the ``(1 -/+ level) / 2``
    percentiles of the kept scores, ``std`` their standard deviation (all NaN when none is kept).
    """
    rng = np.random.default_rng(seed)
    values: list[float] = []
    for _ in range(n_resamples):
        rows = index.draw(rng)
        try:
            values.append(score(rows))
        except ValueError:
            continue
    return _quantiles(values, level)


def _quantiles(values: list[float], level: float) -> tuple[float, float, float]:
    if not values:
        return float("nan"), float("nan"), float("nan")
    low, high = np.quantile(values, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high), float(np.std(values))


def unit_bootstrap(
    metric: Callable[..., float],
    *arrays: npt.ArrayLike,
    units: npt.ArrayLike | None = None,
    unit: str = "case",
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> UnitInterval:
    """Percentile-bootstrap interval of ``metric(*arrays)`` resampling units.

    arrays ``[n, ...]`` share their rows; ``units [n]`` names each row's unit (None: each row
    is a unit) and ``unit`` its noun for printing ("breast", "patient"). Resamples on which the
    metric is undefined (``ValueError``, e.g. one class only for AUROC) are skipped; the
    interval is NaN when none is defined.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    columns = _columns(arrays)
    index = _UnitIndex(units, _check_rows(columns))
    point = float(metric(*columns))

    def score(rows: np.ndarray) -> float:
        return float(metric(*(c[rows] for c in columns)))

    low, high, std = _resample(index, score, n_resamples, seed, level)
    return UnitInterval(point, low, high, std, index.n_units, unit, n_resamples, level)


def paired_bootstrap(
    metric: Callable[..., float],
    model: Sequence[npt.ArrayLike],
    baseline: Sequence[npt.ArrayLike],
    *,
    baseline_metric: Callable[..., float] | None = None,
    units: npt.ArrayLike | None = None,
    unit: str = "case",
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedDifference:
    """Paired bootstrap of ``metric(*model) - metric(*baseline)`` over units.

    ``model`` and ``baseline`` are the argument tuples of ``metric`` for the two readers, every
    array ``[n, ...]`` with the same rows (e.g. ``(labels, model_scores)`` and
    ``(labels, baseline_scores)`` for AUROC). Every trial draws one clustered resample of
    units (:func:`resample_rows`) and scores both readers on those same rows; the interval is
    the ``(1 -/+ level) / 2`` percentiles of the ``n_resamples`` differences. Trials where
    either metric is undefined (``ValueError``) are skipped. ``baseline_metric`` scores the
    baseline's arguments when the two readers need different functions (default ``metric``).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    left, right = _columns(model), _columns(baseline)
    count = _check_rows([*left, *right])
    index = _UnitIndex(units, count)
    other = metric if baseline_metric is None else baseline_metric
    model_value, baseline_value = float(metric(*left)), float(other(*right))

    def difference(rows: np.ndarray) -> float:
        model_score = float(metric(*(c[rows] for c in left)))
        return model_score - float(other(*(c[rows] for c in right)))

    low, high, std = _resample(index, difference, n_resamples, seed, level)
    return PairedDifference(
        model_value,
        baseline_value,
        model_value - baseline_value,
        low,
        high,
        std,
        index.n_units,
        unit,
        n_resamples,
        level,
    )
