"""Trivial readers of mammograms, with no training, scored like a model on the same breasts.

* Intensity statistics of the breast image ``[S, S]`` (display values in [0, 1]):
  ``image_max`` (the brightest pixel), ``tissue_mean`` (mean over pixels above
  :data:`TISSUE_THRESHOLD`, i.e. the breast, not the background) and ``p99_9`` (the 99.9th
  percentile). Each statistic, with either sign, is a score for each binary readout (cancer,
  each finding type, each BI-RADS and density class one-vs-rest); per readout the best of
  these six AUROCs on the evaluated breasts is reported, with the statistic that gave it. The
  choice is made on the same breasts it is reported on, so the baseline is, if anything,
  flattered.
* The max-intensity map: each candidate patch of the ``G x G`` grid scored by its brightest
  pixel, read as an importance map for the Pointing Game and the pixel-level AP.
"""

from __future__ import annotations

import numpy as np
import torch

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.evaluation.metrics import auroc
from medvl_engine.tasks.topksiglip.evaluation import (
    BreastSamples,
    ReadoutTable,
    label_columns,
    outputs_of_samples,
    readout_table,
)

__all__ = [
    "INTENSITY_STATISTICS",
    "TISSUE_THRESHOLD",
    "baseline_readouts",
    "intensity_statistics",
    "max_intensity_map",
]

INTENSITY_STATISTICS = ("image_max", "tissue_mean", "p99_9")
TISSUE_THRESHOLD = 0.05  # display value above which a pixel counts as breast tissue


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


def baseline_readouts(
    dataset: BreastSamples, geometry: PatchGeometry
) -> tuple[ReadoutTable, dict[str, str]]:
    """The trivial readers on every breast of a MammoDataset (unaugmented images).

    Returns the readout table (the zero-shot keys of
    :func:`~medvl_engine.tasks.topksiglip.evaluation.zero_shot_metrics`, each scored by its best
    signed intensity statistic, and the max-intensity map's localisation) and, per key, the
    statistic chosen (``"image_max"`` or ``"-tissue_mean"`` for the negated mean, ...).
    """
    samples = [dataset.sample(i) for i in range(len(dataset))]
    images = [s.image.numpy().reshape(geometry.image_size, geometry.image_size) for s in samples]
    statistics = np.stack([intensity_statistics(image) for image in images])
    maps = np.stack([max_intensity_map(image, geometry) for image in images])
    outputs = outputs_of_samples(samples, torch.zeros((len(samples), 0)), maps)
    truth, known, _ = label_columns(outputs)
    scores: dict[str, np.ndarray] = {}
    chosen: dict[str, str] = {}
    for key in truth:
        labels, rows = truth[key][known[key]], known[key]
        if labels.all() or not labels.any():
            continue
        best: tuple[float, np.ndarray, str] | None = None
        for j, name in enumerate(INTENSITY_STATISTICS):
            for sign, shown in ((1.0, name), (-1.0, f"-{name}")):
                value = auroc(labels, sign * statistics[rows, j])
                if best is None or value > best[0]:
                    best = (value, sign * statistics[:, j], shown)
        if best is not None:
            scores[key], chosen[key] = best[1], best[2]
    return readout_table(outputs, scores, geometry), chosen
