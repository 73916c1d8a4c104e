"""Hand-made image features of a breast image, the kind a reviewer builds in an afternoon:
intensity statistics, white top-hat statistics, speck counts, texture, and maps on the
candidate grid. Every function reads one breast image ``[S, S]`` of display values in [0, 1]
(the unaugmented image the model reads, CC over MLO).

* White top-hat ``T = I - opening(I, s x s)``: what is brighter than its surroundings and
  narrower than ``s`` px (calcification specks at ``s`` = 5, small masses at 15).
* Speck: a pixel of ``T_5`` above ``threshold`` that is the maximum of its 3 x 3 neighbourhood.
  The speck counter is the largest number of specks in any 15 x 15 px window (a cluster of
  calcifications), i.e. ``max_(x, y) sum_{window} speck``.
* Maps ``[G, G]`` over the candidate patches (row a, column b covers x in
  ``[offset + b s, offset + b s + P)``, y likewise): the top-hat energy ``sum T_5^2`` and the
  speck count of each patch.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from medvl_engine.data.patch_geometry import PatchGeometry

__all__ = [
    "FEATURE_NAMES",
    "SPECK_THRESHOLDS",
    "SPECK_WINDOW",
    "TISSUE_THRESHOLD",
    "breast_features",
    "patch_sums",
    "speck_mask",
    "tophat",
]

TISSUE_THRESHOLD = 0.05  # display value above which a pixel counts as breast tissue
SPECK_WINDOW = 15  # px side of the window the speck counter slides
SPECK_THRESHOLDS = (0.04, 0.08, 0.12)  # top-hat heights a speck must reach
FEATURE_NAMES = (
    "image_max",
    "tissue_mean",
    "tissue_std",
    "p99",
    "p99_9",
    "tissue_fraction",
    "tophat5_max",
    "tophat5_mean",
    "tophat5_p99_9",
    "tophat5_energy",
    "tophat3_max",
    "tophat15_max",
    "tophat15_mean",
    "specks_window@0.04",
    "specks_window@0.08",
    "specks_total@0.04",
    "gradient_mean",
    "local_std_mean",
    "log_blob_min",
    "tophat_energy_cell_max",
)
"""The 20 features of :func:`breast_features`, in order."""


def tophat(image: np.ndarray, size: int) -> np.ndarray:
    """White top-hat ``I - opening(I)`` with a ``size x size`` square, ``[S, S]`` float64."""
    pixels = np.asarray(image, dtype=np.float64)
    return np.asarray(ndimage.white_tophat(pixels, size=(size, size)))


def speck_mask(
    tophat5: np.ndarray, threshold: float, peaks: np.ndarray | None = None
) -> np.ndarray:
    """``[S, S]`` bool: local maxima (3 x 3) of the 5 px top-hat above ``threshold``
    (``peaks``: the local-maximum mask when already computed)."""
    if peaks is None:
        peaks = tophat5 == ndimage.maximum_filter(tophat5, size=3)
    return np.asarray(peaks & (tophat5 > threshold))


def window_count_max(mask: np.ndarray, window: int = SPECK_WINDOW) -> int:
    """The most ``True`` pixels of ``mask [S, S]`` in any ``window x window`` px window."""
    counts = ndimage.uniform_filter(mask.astype(np.float64), size=window, mode="constant")
    return int(round(float(counts.max()) * window * window))


def patch_sums(values: np.ndarray, geometry: PatchGeometry) -> np.ndarray:
    """``[G, G]``: the sum of ``values [S, S]`` over each candidate patch (summed-area table)."""
    table = np.pad(np.cumsum(np.cumsum(values, axis=0), axis=1), ((1, 0), (1, 0)))
    starts = geometry.offset + geometry.stride * np.arange(geometry.grid)
    ends = np.minimum(starts + geometry.patch_size, values.shape[0])
    a, b = starts[:, None], ends[:, None]
    c, d = starts[None, :], ends[None, :]
    return np.asarray(table[b, d] - table[a, d] - table[b, c] + table[a, c])


def breast_features(
    image: np.ndarray, geometry: PatchGeometry
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The :data:`FEATURE_NAMES` vector ``[20]`` of a breast image ``[S, S]`` and its maps.

    Maps (``[G, G]`` each): ``"max_intensity"`` (brightest pixel of each candidate patch),
    ``"tophat_energy"`` (``sum T_5^2`` per patch) and ``"speck_count"`` (specks above the
    lowest of :data:`SPECK_THRESHOLDS` per patch). Also returns, under ``"specks"``, the speck
    counter ``[3]`` at each of :data:`SPECK_THRESHOLDS`.
    """
    pixels = np.asarray(image, dtype=np.float64)
    tissue = pixels > TISSUE_THRESHOLD
    inside = pixels[tissue] if tissue.any() else pixels.ravel()
    top3, top5, top15 = (tophat(pixels, size) for size in (3, 5, 15))
    top5_in, top15_in = top5[tissue] if tissue.any() else top5.ravel(), top15[tissue]
    peaks = top5 == ndimage.maximum_filter(top5, size=3)
    masks = [speck_mask(top5, t, peaks) for t in SPECK_THRESHOLDS]
    specks = np.array([window_count_max(mask) for mask in masks], dtype=np.float64)
    gradient = np.hypot(ndimage.sobel(pixels, 0), ndimage.sobel(pixels, 1))
    mean = ndimage.uniform_filter(pixels, 7)
    local_std = np.sqrt(np.maximum(ndimage.uniform_filter(pixels**2, 7) - mean**2, 0.0))
    blob = ndimage.gaussian_laplace(pixels, sigma=3.0)
    energy = patch_sums(top5**2, geometry)
    features = np.array(
        [
            pixels.max(),
            inside.mean(),
            inside.std(),
            np.percentile(pixels, 99),
            np.percentile(pixels, 99.9),
            tissue.mean(),
            top5.max(),
            top5_in.mean(),
            np.percentile(top5, 99.9),
            float((top5_in**2).sum()) / max(int(tissue.sum()), 1),
            top3.max(),
            top15.max(),
            top15_in.mean() if top15_in.size else 0.0,
            specks[0],
            specks[1],
            float(masks[0].sum()),
            gradient[tissue].mean() if tissue.any() else 0.0,
            local_std[tissue].mean() if tissue.any() else 0.0,
            blob[tissue].min() if tissue.any() else 0.0,
            energy.max(),
        ],
        dtype=np.float64,
    )
    starts = geometry.offset + geometry.stride * np.arange(geometry.grid)
    size = geometry.patch_size
    brightest = np.array(
        [[pixels[y : y + size, x : x + size].max() for x in starts] for y in starts]
    )
    maps = {
        "max_intensity": brightest,
        "tophat_energy": energy,
        "speck_count": patch_sums(masks[0].astype(np.float64), geometry),
        "specks": specks,
    }
    return features, maps
