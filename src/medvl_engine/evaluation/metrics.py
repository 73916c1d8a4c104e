"""Classification and localisation metrics, written from their definitions (no sklearn).

Arguments follow the (truth, prediction) order: ``labels`` first, then scores or predictions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

__all__ = [
    "auroc",
    "macro_auroc",
    "average_precision",
    "balanced_accuracy",
    "bootstrap_interval",
    "bootstrap_std",
    "pointing_game",
    "pointing_game_rate",
    "weighted_average_precision",
]


def _binary(labels: npt.ArrayLike, scores: npt.ArrayLike) -> tuple[np.ndarray, ...]:
    y = np.asarray(labels).astype(bool).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"labels {y.shape} and scores {s.shape} differ in length")
    if y.all() or not y.any():
        raise ValueError("AUROC/AP need both positive and negative labels")
    return y, s


def auroc(labels: npt.ArrayLike, scores: npt.ArrayLike) -> float:
    """Area under the ROC curve as the Mann-Whitney rank statistic, ties counted as 1/2.

    ``AUROC = (sum of ranks of positives - P (P + 1) / 2) / (P N)`` with average ranks for
    tied scores. labels ``[n]`` (bool or 0/1), scores ``[n]``. For ``labels [n]`` of class
    ids and ``scores [n, C]`` use :func:`macro_auroc`.
    """
    y, s = _binary(labels, scores)
    ranks = rankdata(s)  # average ranks for ties
    positives, negatives = int(y.sum()), int((~y).sum())
    return float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def macro_auroc(labels: npt.ArrayLike, scores: np.ndarray) -> float:
    """Mean one-vs-rest AUROC over the classes present in ``labels`` (scores ``[n, C]``)."""
    y = np.asarray(labels)
    scores = np.asarray(scores)
    if scores.ndim == 1:
        return auroc(y, scores)
    classes = [c for c in np.unique(y) if 0 < (y == c).sum() < len(y)]
    if not classes:
        raise ValueError("AUROC needs at least two classes in labels")
    return float(np.mean([auroc(y == c, scores[:, int(c)]) for c in classes]))


def average_precision(labels: npt.ArrayLike, scores: npt.ArrayLike) -> float:
    """Average precision ``AP = sum_n (R_n - R_{n-1}) P_n`` over distinct score thresholds.

    Thresholds are the distinct scores in decreasing order; tied scores enter together.
    labels ``[n]`` bool or 0/1, scores ``[n]``.
    """
    y, s = _binary(labels, scores)
    order = np.argsort(-s, kind="mergesort")
    y, s = y[order], s[order]
    last_of_group = np.r_[np.diff(s) != 0, True]
    true_positives = np.cumsum(y)[last_of_group]
    predicted = (np.arange(len(y)) + 1)[last_of_group]
    precision = true_positives / predicted
    recall = true_positives / y.sum()
    previous_recall = np.r_[0.0, recall[:-1]]
    return float(np.sum((recall - previous_recall) * precision))


def weighted_average_precision(
    scores: npt.ArrayLike,
    positive: npt.ArrayLike,
    negative: npt.ArrayLike,
) -> float:
    """:func:`average_precision` of items that stand for several samples each.

    Item ``i`` stands for ``positive[i]`` positive and ``negative[i]`` negative samples that
    all have the score ``scores[i]`` (e.g. a heatmap cell and the pixels it paints), so the
    result equals ``average_precision`` of the expanded samples: ``sum_n (R_n - R_{n-1}) P_n``
    over distinct score thresholds, tied scores entering together. All arrays ``[n]``.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    pos = np.asarray(positive, dtype=np.float64).ravel()
    neg = np.asarray(negative, dtype=np.float64).ravel()
    if not s.shape == pos.shape == neg.shape:
        raise ValueError(f"scores {s.shape}, positive {pos.shape}, negative {neg.shape} differ")
    if pos.sum() <= 0 or neg.sum() <= 0:
        raise ValueError("AUROC/AP need both positive and negative labels")
    order = np.argsort(-s, kind="mergesort")
    s, pos, neg = s[order], pos[order], neg[order]
    last_of_group = np.r_[np.diff(s) != 0, True]
    true_positives = np.cumsum(pos)[last_of_group]
    predicted = np.cumsum(pos + neg)[last_of_group]
    keep = predicted > 0
    precision = true_positives[keep] / predicted[keep]
    recall = true_positives[keep] / pos.sum()
    previous_recall = np.r_[0.0, recall[:-1]]
    return float(np.sum((recall - previous_recall) * precision))


def balanced_accuracy(labels: npt.ArrayLike, predictions: npt.ArrayLike) -> float:
    """Mean over the classes present in ``labels`` of the recall ``TP_c / (TP_c + FN_c)``."""
    y = np.asarray(labels).ravel()
    p = np.asarray(predictions).ravel()
    if y.shape != p.shape:
        raise ValueError(f"labels {y.shape} and predictions {p.shape} differ in length")
    if y.size == 0:
        raise ValueError("balanced accuracy of an empty set is undefined")
    return float(np.mean([np.mean(p[y == c] == c) for c in np.unique(y)]))


def bootstrap_std(
    metric: Callable[..., float],
    *arrays: npt.ArrayLike,
    trials: int = 1000,
    seed: int = 0,
) -> float:
    """Standard deviation of ``metric(*arrays)`` over ``trials`` resamples with replacement.

    Every array is indexed by the same resampled rows. Resamples on which the metric is
    undefined (``ValueError``, e.g. one class only for AUROC) are redrawn-skipped; returns
    NaN when none is defined.
    """
    columns = [np.asarray(a) for a in arrays]
    count = len(columns[0])
    if any(len(c) != count for c in columns):
        raise ValueError("bootstrap arrays must have the same length")
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(trials):
        rows = rng.integers(0, count, size=count)
        try:
            values.append(metric(*(c[rows] for c in columns)))
        except ValueError:
            continue
    return float(np.std(values)) if values else float("nan")


def bootstrap_interval(
    metric: Callable[..., float],
    *arrays: np.ndarray,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float, float]:
    """``(point, low, high, std)`` of ``metric(*arrays)`` by the percentile bootstrap.

    ``point = metric(*arrays)``; ``n_resamples`` resamples draw ``n`` rows (cases) with
    replacement from ``numpy.random.default_rng(seed)``, the same rows from every array
    (arrays ``[n, ...]``). ``low`` / ``high`` are the ``(1 - level) / 2`` and
    ``(1 + level) / 2`` quantiles of the resampled values (linear interpolation) and ``std``
    their standard deviation. Resamples on which the metric is undefined (``ValueError``, e.g.
    one class only for AUROC) are skipped; the interval and std are NaN when none is defined.
    Raises ValueError when the arrays differ in length, are empty, or ``level`` is not in (0, 1).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not arrays:
        raise ValueError("bootstrap_interval needs at least one array")
    columns = [np.asarray(a) for a in arrays]
    count = len(columns[0])
    if any(len(c) != count for c in columns):
        raise ValueError("bootstrap arrays must have the same length")
    if count == 0:
        raise ValueError("bootstrap of an empty set is undefined")
    point = float(metric(*columns))
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        rows = rng.integers(0, count, size=count)
        try:
            values.append(float(metric(*(c[rows] for c in columns))))
        except ValueError:
            continue
    if not values:
        return point, float("nan"), float("nan"), float("nan")
    low, high = np.quantile(values, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return point, float(low), float(high), float(np.std(values))


def pointing_game(heatmap: np.ndarray, boxes: Sequence[Sequence[float]] | np.ndarray) -> bool:
    """Hit when the heatmap's maximum falls inside any ground-truth box.

    heatmap ``[H, W]``; boxes ``[B, 4]`` as ``(x0, y0, x1, y1)`` in heatmap pixels (x = column,
    y = row), half-open: pixel (x, y) is inside when ``x0 <= x < x1`` and ``y0 <= y < y1``.
    With several maxima the first in row-major order counts.
    """
    heatmap = np.asarray(heatmap)
    if heatmap.ndim != 2:
        raise ValueError(f"heatmap must be [H, W], got shape {heatmap.shape}")
    row, col = np.unravel_index(int(np.nanargmax(heatmap)), heatmap.shape)
    for x0, y0, x1, y1 in np.asarray(boxes, dtype=np.float64).reshape(-1, 4):
        if x0 <= col < x1 and y0 <= row < y1:
            return True
    return False


def pointing_game_rate(
    heatmaps: Sequence[np.ndarray], boxes: Sequence[Sequence[Sequence[float]]]
) -> float:
    """Fraction of hits of :func:`pointing_game` over images that have at least one box."""
    results = [pointing_game(h, b) for h, b in zip(heatmaps, boxes, strict=True) if len(b)]
    if not results:
        raise ValueError("pointing game needs at least one image with a ground-truth box")
    return float(np.mean(results))
