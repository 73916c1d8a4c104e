"""The reviewer baselines of TopKSigLIP: speck counter, top-hat maps, the logistic regression on
hand-made features, and the paired margin over the best baseline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.tasks.topksiglip.baselines import BreastInputs, logistic_reader, untrained_readers
from medvl_engine.tasks.topksiglip.evaluation import outputs_of_samples, readout_metrics
from medvl_engine.tasks.topksiglip.margins import margins_over_best, row_metric
from medvl_engine.tasks.topksiglip.reader_features import (
    FEATURE_NAMES,
    breast_features,
    patch_sums,
    window_count_max,
)

GEOMETRY = PatchGeometry.from_image(128, 4, 0.5)


def _speckled(cluster: int, scattered: int, at: tuple[int, int] = (30, 90)) -> np.ndarray:
    """A 128 px breast of flat tissue (0.3) with ``cluster`` 1 px specks inside one 15 x 15 px
    window at (x, y) = ``at`` and ``scattered`` specks far apart."""
    image = np.full((128, 128), 0.3)
    x, y = at
    for j in range(cluster):
        image[y + 3 * (j // 4), x + 3 * (j % 4)] = 0.8
    for j in range(scattered):
        image[10 + 25 * j, 10] = 0.8
    return image


def test_speck_counter_counts_the_densest_15px_window_and_the_maps_point_at_it():
    features, maps = breast_features(_speckled(cluster=6, scattered=3), GEOMETRY)
    assert features.shape == (len(FEATURE_NAMES),) == (20,)
    named = dict(zip(FEATURE_NAMES, features, strict=True))
    assert named["specks_window@0.04"] == 6  # the cluster, not the 9 specks of the image
    assert named["specks_total@0.04"] == 9
    assert named["tophat5_max"] == pytest.approx(0.5)
    # the top-hat energy map and the speck map are highest on the patches over the cluster
    row, col = np.unravel_index(np.argmax(maps["speck_count"]), maps["speck_count"].shape)
    x0, y0, x1, y1 = GEOMETRY.boxes(np.array([row * GEOMETRY.grid + col]))[0]
    assert x0 <= 30 < x1 and y0 <= 90 < y1
    assert maps["tophat_energy"][row, col] == maps["tophat_energy"].max()
    clean, _ = breast_features(np.full((128, 128), 0.3), GEOMETRY)
    assert dict(zip(FEATURE_NAMES, clean, strict=True))["specks_window@0.04"] == 0


def test_window_count_and_patch_sums_by_hand():
    mask = np.zeros((40, 40), dtype=bool)
    mask[5, 5] = mask[5, 18] = mask[30, 30] = True
    assert window_count_max(mask, 15) == 2  # (5,5) and (5,18) are 13 px apart
    assert window_count_max(mask, 3) == 1
    ones = np.ones((128, 128))
    assert np.all(patch_sums(ones, GEOMETRY) == GEOMETRY.patch_size**2)


class _Sample:
    def __init__(self, cancer: bool, boxes: np.ndarray) -> None:
        from medvl_engine.data.mammo_manifest import MammoRecord

        self.record = MammoRecord(
            exam_id="e",
            laterality="L",
            cc_path="cc",
            mlo_path="mlo",
            birads=5 if cancer else 1,
            density="B",
            cancer=cancer,
            findings=["calcification"] if cancer else [],
            report="",
        )
        self.boxes = torch.as_tensor(boxes, dtype=torch.float32)
        self.has_roi = len(boxes) > 0


def _inputs(rng: np.random.Generator, count: int) -> BreastInputs:
    """Breasts whose cancer label shows in feature 13 (the speck counter) plus noise; each
    cancer has an ROI over candidate (row 1, col 2)."""
    cancer = rng.random(count) < 0.4
    features = rng.normal(size=(count, len(FEATURE_NAMES)))
    features[:, 13] += 2.0 * cancer
    box = GEOMETRY.boxes(np.array([1 * GEOMETRY.grid + 2]))
    samples = [_Sample(bool(c), box if c else np.zeros((0, 4))) for c in cancer]
    specks = np.stack([features[:, 13], features[:, 14], features[:, 15]], axis=1)
    speck_map = rng.random((count, GEOMETRY.grid, GEOMETRY.grid))
    speck_map[:, 1, 2] += 2.0  # the speck map peaks on the lesion
    flat = rng.random((count, GEOMETRY.grid, GEOMETRY.grid))
    return BreastInputs(
        features=features,
        specks=specks,
        maps={"max_intensity": flat, "tophat_energy": flat, "speck_count": speck_map},
        outputs=outputs_of_samples(samples, torch.zeros((count, 0)), None),  # type: ignore[arg-type]
        units=np.asarray([f"b{i}" for i in range(count)]),
    )


def test_readers_and_the_margin_over_the_best_of_them():
    rng = np.random.default_rng(0)
    train, validation, test = _inputs(rng, 120), _inputs(rng, 60), _inputs(rng, 100)
    readers = untrained_readers(test, GEOMETRY)
    assert set(readers) == {"intensity", "speck_counter", "tophat_energy"}
    speck_table, chosen = readers["speck_counter"]
    speck = readout_metrics(speck_table)
    assert speck["auroc_cancer"] > 0.8 and chosen["auroc_cancer"].startswith("specks@")
    assert speck["pointing_game"] == 1.0  # its map peaks on every lesion
    random_map = readout_metrics(readers["intensity"][0])  # a map of noise: about chance
    assert random_map["pointing_game"] < 0.9
    assert random_map["pointing_game"] == pytest.approx(random_map["pointing_game_chance"], abs=0.2)
    table, fitted = logistic_reader(train, validation, test)
    logistic = readout_metrics(table)
    assert logistic["auroc_cancer"] > 0.8 and fitted["auroc_cancer"].startswith("C=")
    # row metrics equal the table's metrics on all rows
    rows = np.arange(len(test.units))
    assert row_metric(table, "auroc_cancer")(rows) == pytest.approx(logistic["auroc_cancer"])
    assert row_metric(speck_table, "pixel_ap")(rows) == pytest.approx(speck["pixel_ap"])
    birads = row_metric(table, "auroc_birads_avg")(rows)
    assert birads == pytest.approx(logistic["auroc_birads_avg"])
    # a "model" that knows the labels beats every baseline; the margin names the best one
    perfect = table.with_scores({"auroc_cancer": table.truth["auroc_cancer"].astype(float)}, {}, {})
    tables = {name: t for name, (t, _) in readers.items()} | {"logistic": table}
    margins = margins_over_best(perfect, tables, test.units, ("auroc_cancer",), n_resamples=100)
    best, difference = margins["auroc_cancer"]
    points = {name: readout_metrics(t)["auroc_cancer"] for name, t in tables.items()}
    assert best == max(points, key=points.__getitem__)
    assert difference.difference == pytest.approx(1.0 - points[best])
    assert 0.0 < difference.low <= difference.difference <= difference.high
    assert difference.unit == "breast" and difference.n_units == 100
