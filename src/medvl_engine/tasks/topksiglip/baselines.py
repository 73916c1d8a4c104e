"""Readers a reviewer would build, scored like a model on the same breasts.

Without training (each score's sign, and the statistic, chosen per readout on the evaluated
breasts themselves, so these baselines are, if anything, flattered):

* ``intensity``: intensity statistics of the breast image ``[S, S]`` (display values in
  [0, 1]): ``image_max``, ``tissue_mean`` (mean over pixels above :data:`TISSUE_THRESHOLD`)
  and ``p99_9``; the max-intensity map (brightest pixel of each candidate patch) localises.
* ``speck_counter``: the largest number of white top-hat peaks in any 15 x 15 px window, at
  each of three peak heights (:mod:`~medvl_engine.tasks.topksiglip.reader_features`); the
  speck-count map of the candidate grid localises.
* ``tophat_energy``: the top-hat energy ``sum T_5^2`` (per tissue pixel, or of the strongest
  candidate patch); the top-hat energy map on the ``G x G`` grid localises (Pointing Game,
  pixel AP).

Fitted (:func:`logistic_reader`): ``logistic``, one L2 logistic regression per binary readout
on the 20 hand-made features of :data:`~medvl_engine.tasks.topksiglip.reader_features.
FEATURE_NAMES` (standardised with the training mean and std, balanced class weights), fitted on
the training split only, its regularisation ``C`` chosen on the validation split by AUROC, and
scored on the evaluated breasts. It has no map.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.evaluation.metrics import auroc
from medvl_engine.tasks.topksiglip.evaluation import (
    BreastSamples,
    MammoEvalOutputs,
    ReadoutTable,
    label_columns,
    outputs_of_samples,
    readout_table,
)
from medvl_engine.tasks.topksiglip.reader_features import (
    FEATURE_NAMES,
    SPECK_THRESHOLDS,
    TISSUE_THRESHOLD,
    breast_features,
)

__all__ = [
    "BASELINE_READERS",
    "INTENSITY_STATISTICS",
    "LOGISTIC_C",
    "TISSUE_THRESHOLD",
    "BreastInputs",
    "baseline_readouts",
    "breast_inputs",
    "intensity_statistics",
    "logistic_reader",
    "max_intensity_map",
    "untrained_readers",
]

INTENSITY_STATISTICS = ("image_max", "tissue_mean", "p99_9")
LOGISTIC_C = (0.01, 0.1, 1.0, 10.0, 100.0)
"""Inverse L2 strengths tried for the logistic baseline, the one chosen on validation."""
BASELINE_READERS = {
    "intensity": "intensity statistics; max-intensity map",
    "speck_counter": "top-hat peaks in a 15x15 px window; speck-count map",
    "tophat_energy": "top-hat energy; top-hat energy map",
    "logistic": "logistic regression on 20 features (fit: train, C: validation)",
}
"""Baseline readers, in print order, with what each reads."""

_STATISTIC_COLUMNS = {
    "intensity": {name: FEATURE_NAMES.index(name) for name in INTENSITY_STATISTICS},
    "tophat_energy": {
        "tophat5_energy": FEATURE_NAMES.index("tophat5_energy"),
        "tophat_energy_cell_max": FEATURE_NAMES.index("tophat_energy_cell_max"),
    },
}
_MAPS = {
    "intensity": "max_intensity",
    "speck_counter": "speck_count",
    "tophat_energy": "tophat_energy",
}


@dataclass
class BreastInputs:
    """What the baselines read of n breasts: ``features [n, 20]``, ``specks [n, 3]`` (the speck
    counter at each threshold), ``maps {name: [n, G, G]}``, ``outputs`` (labels and ROI boxes)
    and ``units [n]`` (each breast's exam id, the unit a bootstrap resamples)."""

    features: np.ndarray
    specks: np.ndarray
    maps: dict[str, np.ndarray]
    outputs: MammoEvalOutputs
    units: np.ndarray


def intensity_statistics(
    image: np.ndarray, tissue_threshold: float = TISSUE_THRESHOLD
) -> np.ndarray:
    """``[3]``: image maximum, mean tissue intensity (pixels > ``tissue_threshold``; 0 when
    none) and the 99.9th percentile of a breast image ``[S, S]``, in
    :data:`INTENSITY_STATISTICS` order."""
    pixels = np.asarray(image, dtype=np.float64)
    tissue = pixels[pixels > tissue_threshold]
    return np.array(
        [
            float(pixels.max()),
            float(tissue.mean()) if tissue.size else 0.0,
            float(np.percentile(pixels, 99.9)),
        ]
    )


def max_intensity_map(image: np.ndarray, geometry: PatchGeometry) -> np.ndarray:
    """``[G, G]``: the brightest pixel of each candidate patch (row a, column b covers
    x in ``[offset + b s, offset + b s + P)``, y likewise) of a breast image ``[S, S]``."""
    pixels = np.asarray(image, dtype=np.float64)
    starts = geometry.offset + geometry.stride * np.arange(geometry.grid)
    size = geometry.patch_size
    return np.array([[pixels[y : y + size, x : x + size].max() for x in starts] for y in starts])


def breast_inputs(dataset: BreastSamples, geometry: PatchGeometry) -> BreastInputs:
    """Features, speck counts, maps, labels and exam ids of every breast of a dataset
    (unaugmented images ``[S, S]``)."""
    features, specks, units, samples = [], [], [], []
    maps: dict[str, list[np.ndarray]] = {name: [] for name in _MAPS.values()}
    for i in range(len(dataset)):
        sample = dataset.sample(i)
        image = sample.image.numpy().reshape(geometry.image_size, geometry.image_size)
        vector, found = breast_features(image, geometry)
        features.append(vector)
        specks.append(found["specks"])
        for name in maps:
            maps[name].append(found[name])
        exam = getattr(sample.record, "exam_id", None)  # without one: its own unit
        units.append(str(exam) if exam is not None else f"breast-{i}")
        samples.append(sample)
    count = len(samples)
    grid = (0, geometry.grid, geometry.grid)
    return BreastInputs(
        features=np.asarray(features, dtype=np.float64).reshape(count, len(FEATURE_NAMES)),
        specks=np.asarray(specks, dtype=np.float64).reshape(count, len(SPECK_THRESHOLDS)),
        maps={
            k: np.asarray(v).reshape(-1, *grid[1:]) if v else np.zeros(grid)
            for k, v in maps.items()
        },
        outputs=outputs_of_samples(samples, torch.zeros((count, 0)), None),
        units=np.asarray(units),
    )


def _statistics(inputs: BreastInputs, reader: str) -> dict[str, np.ndarray]:
    if reader == "speck_counter":
        return {f"specks@{t:g}": inputs.specks[:, j] for j, t in enumerate(SPECK_THRESHOLDS)}
    return {name: inputs.features[:, j] for name, j in _STATISTIC_COLUMNS[reader].items()}


def _best_signed(
    statistics: dict[str, np.ndarray], truth: dict[str, np.ndarray], known: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Per readout, the statistic and sign with the best AUROC on these breasts."""
    scores: dict[str, np.ndarray] = {}
    chosen: dict[str, str] = {}
    for key in truth:
        labels, rows = truth[key][known[key]], known[key]
        if labels.all() or not labels.any():
            continue
        best: tuple[float, np.ndarray, str] | None = None
        for name, values in statistics.items():
            for sign, shown in ((1.0, name), (-1.0, f"-{name}")):
                value = auroc(labels, sign * values[rows])
                if best is None or value > best[0]:
                    best = (value, sign * values, shown)
        if best is not None:
            scores[key], chosen[key] = best[1], best[2]
    return scores, chosen


def _with_map(outputs: MammoEvalOutputs, importance: np.ndarray | None) -> MammoEvalOutputs:
    from dataclasses import replace

    return replace(outputs, importance=importance)


def untrained_readers(
    inputs: BreastInputs, geometry: PatchGeometry
) -> dict[str, tuple[ReadoutTable, dict[str, str]]]:
    """``{reader: (table, chosen statistic per readout)}`` of the readers without training."""
    truth, known, _ = label_columns(inputs.outputs)
    readers = {}
    for reader, map_name in _MAPS.items():
        scores, chosen = _best_signed(_statistics(inputs, reader), truth, known)
        outputs = _with_map(inputs.outputs, inputs.maps[map_name])
        readers[reader] = (readout_table(outputs, scores, geometry), chosen)
    return readers


def _standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    mean, std = train.mean(axis=0), train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return [(a - mean) / std for a in (train, *others)]


def logistic_reader(
    train: BreastInputs, validation: BreastInputs | None, evaluated: BreastInputs
) -> tuple[ReadoutTable, dict[str, str]]:
    """The fitted baseline: per binary readout a logistic regression on the 20 features of the
    training breasts, ``C`` from :data:`LOGISTIC_C` with the best validation AUROC (the
    smallest on ties; 1.0 without validation breasts of both classes), scored on
    ``evaluated``. Returns the table and ``{readout: "C=<c>"}``; readouts whose training
    labels hold one class are left out."""
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    train_x, eval_x, val_x = _standardise(
        train.features,
        evaluated.features,
        validation.features if validation is not None else train.features[:0],
    )
    truth, known, _ = label_columns(train.outputs)
    val_truth, val_known, _ = (
        label_columns(validation.outputs) if validation is not None else ({}, {}, {})
    )
    scores: dict[str, np.ndarray] = {}
    chosen: dict[str, str] = {}
    for key in truth:
        labels = truth[key][known[key]]
        if labels.all() or not labels.any():
            continue
        rows = known[key]

        def fit(
            c: float, rows: np.ndarray = rows, labels: np.ndarray = labels
        ) -> LogisticRegression:
            model = LogisticRegression(
                C=c, class_weight="balanced", solver="liblinear", max_iter=2000
            )
            return model.fit(train_x[rows], labels)

        best_c = 1.0
        if key in val_truth:
            v_rows = val_known[key]
            v_labels = val_truth[key][v_rows]
            if v_labels.any() and not v_labels.all():
                values = [
                    auroc(v_labels, fit(c).decision_function(val_x[v_rows])) for c in LOGISTIC_C
                ]
                best_c = LOGISTIC_C[int(np.argmax(values))]
        scores[key] = fit(best_c).decision_function(eval_x)
        chosen[key] = f"C={best_c:g}"
    return readout_table(evaluated.outputs, scores, None), chosen


def baseline_readouts(
    dataset: BreastSamples, geometry: PatchGeometry
) -> tuple[ReadoutTable, dict[str, str]]:
    """The intensity-statistics reader on every breast of a MammoDataset: its table (best
    signed statistic per readout, max-intensity map) and the statistic chosen per readout
    (``"image_max"``, ``"-tissue_mean"`` for the negated mean, ...)."""
    return untrained_readers(breast_inputs(dataset, geometry), geometry)["intensity"]
