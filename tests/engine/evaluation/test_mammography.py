"""Per-breast readouts (shardable, bootstrapped), pooled-cell AP, and the trivial baselines."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.evaluation.metrics import (
    auroc,
    average_precision,
    bootstrap_interval,
    weighted_average_precision,
)
from medvl_engine.tasks.topksiglip.baselines import (
    baseline_readouts,
    intensity_statistics,
    max_intensity_map,
)
from medvl_engine.tasks.topksiglip.evaluation import (
    MammoEvalOutputs,
    ReadoutTable,
    bootstrap_readouts,
    localisation_metrics,
    readout_metrics,
    readout_table,
    zero_shot_columns,
)

GEOMETRY = PatchGeometry.from_image(256, 8, 0.5)


def _outputs(count: int, seed: int = 0) -> MammoEvalOutputs:
    rng = np.random.default_rng(seed)
    boxes = []
    for i in range(count):
        if i % 3 == 2:
            boxes.append(np.zeros((0, 4)))
            continue
        x, y = rng.uniform(10, 200, size=2)
        boxes.append(np.array([[x, y, x + rng.uniform(8, 40), y + rng.uniform(8, 40)]]))
    return MammoEvalOutputs(
        embeddings=torch.zeros(count, 2),
        importance=rng.random((count, 8, 8)),
        birads=rng.integers(1, 6, count),
        density=rng.integers(0, 4, count),
        cancer=rng.random(count) < 0.4,
        findings=rng.random((count, 4)) < 0.5,
        boxes=boxes,
    )


def _probs(count: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = {"birads": 5, "density": 4, "cancer": 2}
    sizes.update({k: 2 for k in ("mass", "calcification", "architectural distortion", "asymmetry")})
    return {task: rng.dirichlet(np.ones(c), size=count) for task, c in sizes.items()}


def _pixel_reference_ap(outputs: MammoEvalOutputs, resolution: int = 192) -> float:
    """Pixel-level AP written out pixel by pixel: each pixel shows the importance of the cell
    whose stride band holds its centre; labels are the boxes scaled to the resolution."""
    edges = GEOMETRY.cell_bounds() * resolution / GEOMETRY.image_size
    centres = np.arange(resolution) + 0.5
    cell = np.clip(np.searchsorted(edges, centres, side="right") - 1, 0, GEOMETRY.grid - 1)
    scale = resolution / GEOMETRY.image_size
    scores, labels = [], []
    for importance, boxes in zip(outputs.importance, outputs.boxes, strict=True):
        if not len(boxes):
            continue
        mask = np.zeros((resolution, resolution), dtype=bool)
        for x0, y0, x1, y1 in boxes * scale:
            mask[int(np.floor(y0)) : int(np.ceil(y1)), int(np.floor(x0)) : int(np.ceil(x1))] = 1
        scores.append(importance[np.ix_(cell, cell)].ravel())
        labels.append(mask.ravel())
    return average_precision(np.concatenate(labels), np.concatenate(scores))


def test_weighted_average_precision_equals_the_expanded_samples():
    scores = np.array([0.9, 0.5, 0.5, 0.2, 0.7])
    positive = np.array([2, 0, 1, 3, 0])
    negative = np.array([1, 4, 0, 2, 1])
    labels = np.concatenate(
        [np.r_[np.ones(p), np.zeros(n)] for p, n in zip(positive, negative, strict=True)]
    )
    expanded = np.repeat(scores, positive + negative)
    assert weighted_average_precision(scores, positive, negative) == pytest.approx(
        average_precision(labels, expanded)
    )
    with pytest.raises(ValueError, match="both positive and negative"):
        weighted_average_precision([0.1], [0], [3])


def test_pixel_ap_from_pooled_cells_equals_the_pixel_by_pixel_ap():
    outputs = _outputs(12)
    metrics = localisation_metrics(outputs, GEOMETRY)
    assert metrics["pixel_ap"] == pytest.approx(_pixel_reference_ap(outputs), rel=1e-12)
    assert metrics["roi_cases"] == 8


def test_tables_of_row_shards_concatenate_to_the_metrics_of_all_breasts():
    outputs, probs = _outputs(14), _probs(14)
    table = readout_table(outputs, zero_shot_columns(probs), GEOMETRY)
    whole = readout_metrics(table)
    assert {"auroc_cancer", "auroc_birads_avg", "pointing_game", "pixel_ap"} <= set(whole)
    shards = [table.rows(range(rank, 14, 3)) for rank in range(3)]
    merged = readout_metrics(ReadoutTable.concat(shards))
    assert merged.keys() == whole.keys()
    for key, value in whole.items():
        assert merged[key] == pytest.approx(value, rel=1e-12)
    assert whole["auroc_cancer"] == pytest.approx(auroc(outputs.cancer, probs["cancer"][:, 1]))
    birads = [auroc(outputs.birads == c + 1, probs["birads"][:, c]) for c in range(5)]
    assert whole["auroc_birads_avg"] == pytest.approx(np.mean(birads))


def test_bootstrap_readouts_resample_breasts_like_bootstrap_interval():
    outputs, probs = _outputs(20, seed=4), _probs(20, seed=5)
    table = readout_table(outputs, zero_shot_columns(probs), GEOMETRY)
    result = bootstrap_readouts(table, n_resamples=80, seed=9)
    # a metric defined on every resample gets exactly bootstrap_interval's numbers
    assert result["pixel_ap_chance"] == pytest.approx(
        bootstrap_interval(
            lambda rows: readout_metrics(table.rows(rows))["pixel_ap_chance"],
            np.arange(20),
            n_resamples=80,
            seed=9,
        )
    )
    for _, low, high, std in result.values():
        assert low <= high and std >= 0
    point, low, high, std = result["auroc_cancer"]
    assert point == readout_metrics(table)["auroc_cancer"] and low < point < high


def test_intensity_statistics_and_max_intensity_map_by_hand():
    image = np.zeros((256, 256), np.float32)
    image[10:20, 10:20] = 0.2  # tissue
    image[100, 200] = 0.9  # one bright pixel
    stats = intensity_statistics(image)
    assert stats[0] == pytest.approx(0.9)
    assert stats[1] == pytest.approx((100 * 0.2 + 0.9) / 101)
    assert stats[2] == pytest.approx(np.percentile(image, 99.9))
    assert intensity_statistics(np.zeros((4, 4)))[1] == 0.0  # no tissue
    maps = max_intensity_map(image, GEOMETRY)
    assert maps.shape == (8, 8)
    x0 = GEOMETRY.origins()[:, 0].reshape(8, 8)
    y0 = GEOMETRY.origins()[:, 1].reshape(8, 8)
    size = GEOMETRY.patch_size
    holds = (x0 <= 200) & (200 < x0 + size) & (y0 <= 100) & (100 < y0 + size)
    assert np.all(maps[holds] == pytest.approx(0.9)) and holds.any()
    assert np.all(maps[~holds] <= 0.2 + 1e-7)


class _Breasts:
    """A dataset of hand-made breasts: cancer breasts are darker (a negated statistic wins)."""

    def __init__(self, count: int) -> None:
        self.items = []
        for i in range(count):
            cancer = i % 2 == 0
            image = np.zeros((256, 256), np.float32)
            image[40:200, 40:200] = 0.3 if cancer else 0.6
            box = np.array([[60.0, 60.0, 90.0, 90.0]])
            if cancer:
                image[70, 70] = 0.9  # the lesion is the brightest pixel of a cancer breast
            else:  # a bright spot as bright or brighter: the maximum does not separate
                image[150, 150] = 0.85 if i % 4 == 1 else 0.95
            record = SimpleNamespace(
                birads=5 if cancer else 1,
                density="AB"[i % 2],
                cancer=cancer,
                findings=["mass"] if cancer else [],
            )
            self.items.append(
                SimpleNamespace(
                    image=torch.from_numpy(image)[None],
                    boxes=torch.from_numpy(box if cancer else np.zeros((0, 4))),
                    has_roi=cancer,
                    record=record,
                )
            )

    def __len__(self) -> int:
        return len(self.items)

    def sample(self, index: int, epoch: int = 0):
        return self.items[index]


def test_baselines_pick_the_best_signed_statistic_and_read_the_max_map():
    table, chosen = baseline_readouts(_Breasts(10), GEOMETRY)
    metrics = readout_metrics(table)
    assert chosen["auroc_cancer"] == "-tissue_mean"  # darker breasts are the cancers
    assert metrics["auroc_cancer"] == 1.0
    assert chosen["auroc_density_A"] == "-tissue_mean" and metrics["auroc_density_A"] == 1.0
    assert metrics["pointing_game"] == 1.0  # the lesion pixel is each cancer's maximum
    assert metrics["roi_cases"] == 5
    assert "auroc_calcification" not in metrics  # no positives: undefined, left out
