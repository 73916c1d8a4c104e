"""Baselines without text: what the frozen encoder's features classify on their own.

A reviewer's first question of a zero-shot slide classifier is how far the same patch features
get with no text at all. Each slide ``[M, D]`` becomes one vector by mean pooling
(``h = (1/M) sum_i v_i``) or random pooling (the mean of ``n`` patches drawn without
replacement, one seeded draw per slide, :func:`~.slides.random_patch_pool`); two classifiers
are fitted on the TRAINING split and scored on the evaluation slides:

- nearest centroid: ``mu_k = mean of h over training slides of class k``,
  ``y = argmin_k ||h - mu_k||_2``;
- linear probe: multinomial logistic regression (scikit-learn) on standardised ``h``, its
  inverse regularisation ``C`` chosen on the VALIDATION split (organ-mean balanced accuracy;
  ``C = 1`` when validation has no labelled slides).

Like the zero-shot protocol (and the paper's supervised baselines, Sec. 3.4) a slide's
prediction is restricted to the choices of its organ's category (:func:`choice_categories`).
Predictions are :data:`~.scoring.PredictionRow` tuples, scored like the zero-shot rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch

from medvl_engine.tasks.limit.evaluation.scoring import (
    SINGLE_LABEL_GROUP,
    PredictionRow,
    choice_categories,
    score_zero_shot,
)
from medvl_engine.tasks.limit.evaluation.slides import SlideExample, random_patch_pool

__all__ = [
    "BASELINE_POOLINGS",
    "C_GRID",
    "SlidePooling",
    "linear_probe_rows",
    "nearest_centroid_rows",
    "slide_vectors",
]

SlidePooling = Literal["mean", "random"]
BASELINE_POOLINGS: tuple[SlidePooling, ...] = ("mean", "random")
C_GRID: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
"""The linear probe's candidate ``C``; the one with the best validation accuracy is used."""


def slide_vectors(
    slides: Sequence[SlideExample], pooling: SlidePooling, random_patches: int = 10, seed: int = 0
) -> np.ndarray:
    """One vector per slide, ``[S, D]`` float64: mean pooling or random pooling (module doc).

    Random pooling seeds slide ``s``'s draw with ``seed * 1_000_003 + s``, so a slide's vector
    does not depend on the other slides.
    """
    if pooling not in BASELINE_POOLINGS:
        raise ValueError(f"slide pooling must be one of {BASELINE_POOLINGS}, got {pooling!r}")
    vectors = []
    for index, slide in enumerate(slides):
        features = slide.features.float()
        if pooling == "mean":
            vectors.append(features.mean(0))
        else:
            generator = torch.Generator().manual_seed((seed * 1_000_003 + index) % 2**63)
            vectors.append(random_patch_pool(features, random_patches, generator))
    return torch.stack(vectors).double().numpy()


def _options(
    classes_by_organ: Mapping[str, Sequence[str]], group_single_label: bool
) -> tuple[list[tuple[str, str]], dict[str, list[int]]]:
    """Every (organ, class) option and, per organ, the option indices it may choose from."""
    categories = choice_categories(classes_by_organ, group_single_label, SINGLE_LABEL_GROUP)
    options = [option for members in categories.values() for option in members]
    index = {option: i for i, option in enumerate(options)}
    allowed = {}
    for members in categories.values():
        ids = [index[o] for o in members]
        for organ, _ in members:
            allowed[organ] = ids
    return options, allowed


def _category_of(
    classes_by_organ: Mapping[str, Sequence[str]], group_single_label: bool
) -> dict[str, str]:
    categories = choice_categories(classes_by_organ, group_single_label, SINGLE_LABEL_GROUP)
    return {organ: name for name, members in categories.items() for organ, _ in members}


def _rows(
    slides: Sequence[SlideExample],
    scores: np.ndarray,
    classes_by_organ: Mapping[str, Sequence[str]],
    group_single_label: bool,
) -> list[PredictionRow]:
    """Prediction rows from per-option scores ``[S, K]`` (higher is better; -inf: unusable),
    each slide's argmax restricted to its organ's choices."""
    options, allowed = _options(classes_by_organ, group_single_label)
    category_of = _category_of(classes_by_organ, group_single_label)
    rows: list[PredictionRow] = []
    for slide, row in zip(slides, scores, strict=True):
        ids = allowed[slide.organ]
        best = ids[int(np.argmax(row[ids]))]
        rows.append(
            (slide.slide_id, category_of[slide.organ], slide.organ, slide.label, *options[best])
        )
    return rows


def _option_index(
    slides: Sequence[SlideExample], classes_by_organ: Mapping[str, Sequence[str]], grouped: bool
) -> np.ndarray:
    options, _ = _options(classes_by_organ, grouped)
    index = {option: i for i, option in enumerate(options)}
    return np.asarray([index[(s.organ, s.label)] for s in slides])


def nearest_centroid_rows(
    train: Sequence[SlideExample],
    test: Sequence[SlideExample],
    classes_by_organ: Mapping[str, Sequence[str]],
    pooling: SlidePooling = "mean",
    *,
    random_patches: int = 10,
    seed: int = 0,
    group_single_label: bool = True,
) -> list[PredictionRow]:
    """Nearest-centroid predictions of ``test`` from centroids of ``train`` (module doc).

    An option with no training slide has no centroid and is never predicted.
    """
    if not train:
        raise ValueError("the nearest-centroid baseline needs labelled training slides")
    options, _ = _options(classes_by_organ, group_single_label)
    x_train = slide_vectors(train, pooling, random_patches, seed)
    y_train = _option_index(train, classes_by_organ, group_single_label)
    centroids = np.full((len(options), x_train.shape[1]), np.nan)
    for k in np.unique(y_train):
        centroids[k] = x_train[y_train == k].mean(0)
    x_test = slide_vectors(test, pooling, random_patches, seed + 1)
    distance = np.linalg.norm(x_test[:, None, :] - centroids[None], axis=-1)  # [S, K]
    scores = np.where(np.isnan(distance), -np.inf, -distance)
    return _rows(test, scores, classes_by_organ, group_single_label)


def _probe_scores(model: Any, x: np.ndarray, n_options: int) -> np.ndarray:
    """Decision scores ``[S, K]`` over every option (-inf for options absent in training)."""
    scores = np.full((len(x), n_options), -np.inf)
    decision = model.decision_function(x)
    if decision.ndim == 1:  # two classes: the score of classes_[1]
        decision = np.stack([-decision, decision], axis=1)
    scores[:, model.classes_] = decision
    return scores


def linear_probe_rows(
    train: Sequence[SlideExample],
    val: Sequence[SlideExample],
    test: Sequence[SlideExample],
    classes_by_organ: Mapping[str, Sequence[str]],
    pooling: SlidePooling = "mean",
    *,
    random_patches: int = 10,
    seed: int = 0,
    group_single_label: bool = True,
    c_grid: Sequence[float] = C_GRID,
) -> tuple[list[PredictionRow], float]:
    """Linear-probe predictions of ``test`` (module doc) and the ``C`` chosen on ``val``.

    The probe is ``StandardScaler`` then ``LogisticRegression(C)`` fitted on ``train``; each
    ``C`` of ``c_grid`` is scored on ``val`` by organ-mean balanced accuracy (ties: the
    smaller ``C``); with no labelled ``val`` slide ``C = 1``.
    """
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]
    from sklearn.pipeline import make_pipeline  # type: ignore[import-untyped]
    from sklearn.preprocessing import StandardScaler  # type: ignore[import-untyped]
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    options, _ = _options(classes_by_organ, group_single_label)
    x_train = slide_vectors(train, pooling, random_patches, seed)
    y_train = _option_index(train, classes_by_organ, group_single_label)
    if len(np.unique(y_train)) < 2:
        raise ValueError("the linear probe needs training slides of two or more classes")

    def fit(c: float) -> Any:
        probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=5000))
        with threadpool_limits(1):  # tiny problems: BLAS threads only contend on busy cores
            probe.fit(x_train, y_train)
        return probe

    chosen = 1.0
    if val:
        x_val = slide_vectors(val, pooling, random_patches, seed + 2)
        best = -1.0
        for c in sorted(c_grid):
            rows = _rows(
                val,
                _probe_scores(fit(c), x_val, len(options)),
                classes_by_organ,
                group_single_label,
            )
            value = score_zero_shot(
                [rows], classes_by_organ, trials=0, group_single_label=group_single_label
            )
            accuracy = float(value["organ_mean"])
            if accuracy > best:
                best, chosen = accuracy, float(c)
    x_test = slide_vectors(test, pooling, random_patches, seed + 1)
    scores = _probe_scores(fit(chosen), x_test, len(options))
    return _rows(test, scores, classes_by_organ, group_single_label), chosen
