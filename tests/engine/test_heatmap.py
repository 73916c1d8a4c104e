"""Heatmap equations against hand-computed values, grid geometry, top patches, and a real
synthetic slide where the demo encoder's "tumor" heatmap must find the tumour."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import normalize_scores, similarity_map, top_patches

# Four unit features on a 2 x 2 grid of 10 px patches: (0,0) (10,0) (0,10) (10,10).
FEATURES = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]], dtype=np.float32)
COORDS = np.array([[0, 0], [10, 0], [0, 10], [10, 10]], dtype=np.int64)


def _store(mpp=None, coords=COORDS, features=FEATURES, patch=10) -> FeatureStore:
    return FeatureStore(features, coords, patch_size_level0=patch, patch_size=patch, mpp=mpp)


def test_cosine_grid_is_the_dot_product_per_cell():
    heatmap = similarity_map(_store(), torch.tensor([[2.0, 0.0]]))  # prompt is normalised
    np.testing.assert_allclose(heatmap.scores, [1.0, 0.0, 0.6, -1.0], atol=1e-6)
    np.testing.assert_allclose(heatmap.grid, [[1.0, 0.0], [0.6, -1.0]], atol=1e-6)
    assert heatmap.grid.dtype == np.float32


def test_softmax_gives_class_probability():
    text = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    heatmap = similarity_map(_store(), text, mode="softmax", target=1, temperature=0.5)
    expected_patch2 = math.exp(0.8 / 0.5) / (math.exp(0.6 / 0.5) + math.exp(0.8 / 0.5))
    assert heatmap.grid[1, 0] == pytest.approx(expected_patch2, abs=1e-6)
    assert heatmap.scores[0] == pytest.approx(1 / (1 + math.exp(2.0)), abs=1e-6)


def test_contrast_is_prompt_a_minus_prompt_b():
    text = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    heatmap = similarity_map(_store(), text, mode="contrast")
    np.testing.assert_allclose(heatmap.scores, [1.0, -1.0, -0.2, -1.0], atol=1e-6)
    with pytest.raises(ValueError, match="exactly 2 prompts"):
        similarity_map(_store(), torch.eye(2)[:1], mode="contrast")


def test_normalisations():
    scores = np.array([0.2, -0.4, 0.8, 0.5], dtype=np.float32)
    np.testing.assert_allclose(normalize_scores(scores, "percentile"), [1 / 3, 0, 1, 2 / 3])
    np.testing.assert_allclose(normalize_scores(scores, "minmax"), [0.5, 0.0, 1.0, 0.75])
    np.testing.assert_allclose(
        normalize_scores(scores, "fixed", (0.0, 0.5)), [0.4, 0.0, 1.0, 1.0], atol=1e-6
    )


def test_overlapping_patches_average_per_cell_and_gaps_are_nan():
    features = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    coords = np.array([[0, 0], [5, 0], [0, 20]], dtype=np.int64)  # stride 5, patch 10
    heatmap = similarity_map(_store(coords=coords, features=features), torch.tensor([[1.0, 0.0]]))
    assert heatmap.cell_size_level0 == 5
    assert heatmap.grid.shape == (6, 3)
    np.testing.assert_allclose(heatmap.grid[0], [1.0, 0.8, 0.6], atol=1e-6)
    np.testing.assert_allclose(heatmap.grid[1], [1.0, 0.8, 0.6], atol=1e-6)
    assert np.isnan(heatmap.grid[2:4]).all()
    np.testing.assert_allclose(heatmap.grid[4:6, :2], 0.0, atol=1e-6)
    assert np.isnan(heatmap.grid[4:6, 2]).all()


def test_world_transform_in_micrometres_and_pixels():
    coords = COORDS + np.array([100, 200])
    heatmap = similarity_map(_store(mpp=(0.5, 0.25), coords=coords), torch.tensor([[1.0, 0.0]]))
    assert heatmap.units == "um" and heatmap.origin_level0 == (100, 200)
    assert heatmap.scale == (10 * 0.25, 10 * 0.5)
    # cell (0, 0) covers level-0 px [100, 110) x [200, 210): its centre is at (105, 205) px
    assert heatmap.translate == (205 * 0.25, 105 * 0.5)
    plain = similarity_map(_store(coords=coords), torch.tensor([[1.0, 0.0]]))
    assert plain.units == "px" and plain.scale == (10.0, 10.0) and plain.translate == (205, 105)


def test_smoothing_keeps_constant_regions_and_nan_holes():
    features = np.tile([[1.0, 0.0]], (8, 1)).astype(np.float32)
    coords = np.array([[x * 10, y * 10] for y in range(3) for x in range(3) if (x, y) != (1, 1)])
    heatmap = similarity_map(
        _store(coords=coords, features=features), torch.tensor([[1.0, 0.0]]), smooth_sigma=1.0
    )
    assert np.isnan(heatmap.grid[1, 1])
    np.testing.assert_allclose(heatmap.grid[np.isfinite(heatmap.grid)], 1.0, atol=1e-5)


def test_top_patches_are_boxes_sorted_by_score():
    scores = np.array([0.1, np.nan, 0.9, 0.5], dtype=np.float32)
    boxes, top = top_patches(_store(), scores, n=5)
    np.testing.assert_array_equal(boxes, [[0, 10, 10, 20], [10, 10, 20, 20], [0, 0, 10, 10]])
    np.testing.assert_allclose(top, [0.9, 0.5, 0.1])
    boxes, top = top_patches(_store(), scores, n=1)
    assert boxes.tolist() == [[0, 10, 10, 20]]


def _auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Mann-Whitney AUROC: the chance a positive outscores a negative (ties count half)."""
    pos, neg = scores[positive], scores[~positive]
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def test_demo_encoder_tumor_heatmap_finds_the_tumor(tmp_path, demo_encoder):
    from medvl_engine.features import slide_features
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import TISSUE_CLASSES, make_synthetic_slide

    truth = make_synthetic_slide(
        tmp_path / "slide.tiff",
        seed=3,
        size=(2048, 2048),
        classes=("tumor", "stroma", "adipose", "lymphocytes"),
    )
    encoder = demo_encoder()
    with open_slide(truth.path) as slide:  # tissue grid of 64 px patches at 0.5 um/px
        store = slide_features(slide, encoder, tmp_path / "f.zarr", patch_size=64)
    cell = truth.label_downsample
    tumor_share = np.array(
        [
            np.mean(
                truth.label_map[y // cell : (y + 64) // cell, x // cell : (x + 64) // cell]
                == TISSUE_CLASSES.index("tumor")
            )
            for x, y in store.coords
        ]
    )
    clear = (tumor_share > 0.5) | (tumor_share < 0.1)  # mixed patches have no single truth
    tumor = tumor_share[clear] > 0.5
    assert 20 < tumor.sum() < clear.sum() - 20
    heatmap = similarity_map(store, encoder.encode_text(["tumor"]), prompt="tumor")
    assert _auroc(heatmap.scores[clear], tumor) > 0.95
    # the grid places each patch's score at its own cell
    cols, rows = ((store.coords - heatmap.origin_level0) // heatmap.cell_size_level0).T
    np.testing.assert_allclose(heatmap.grid[rows, cols], heatmap.scores)


class _FixedText:
    """Stands in for an encoder: maps each prompt to a fixed unit vector."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def encode_text(self, texts):
        rows = torch.tensor([self.table[t] for t in texts], dtype=torch.float32)
        return torch.nn.functional.normalize(rows, dim=-1)


def test_classify_slide_follows_report_guided_pooling_by_hand():
    from medvl_engine.heatmap import classify_slide

    features = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    store = _store(coords=np.array([[0, 0], [10, 0], [20, 0]]), features=features)
    encoder = _FixedText({"a": [1.0, 0.0], "b": [0.0, 1.0], "b2": [0.0, 1.0]})
    ranked = classify_slide(store, encoder, ["b", "a"], tau_attn=1.0)
    # query a: alpha = (e, e, 1) / (2e + 1); h = (2e, 1) / (2e + 1); cos(h, a) = 2e / |(2e, 1)|
    e = math.e
    score_a = 2 * e / math.hypot(2 * e, 1)
    # query b: alpha = (1, 1, e) / (2 + e); h = (2, e) / (2 + e); cos(h, b) = e / |(2, e)|
    score_b = e / math.hypot(2, e)
    assert [name for name, _ in ranked] == ["a", "b"]
    assert ranked[0][1] == pytest.approx(score_a, abs=1e-6)
    assert ranked[1][1] == pytest.approx(score_b, abs=1e-6)
    grouped = classify_slide(store, encoder, {"A": ["a"], "B": ["b", "b2"]}, tau_attn=1.0)
    assert dict(grouped)["B"] == pytest.approx(score_b, abs=1e-6)


def test_classify_slide_refuses_too_few_or_repeated_classes_in_one_sentence():
    from medvl_engine.errors import ConfigError
    from medvl_engine.heatmap import classify_slide

    store = _store(coords=np.array([[0, 0], [10, 0]]), features=np.eye(2, dtype=np.float32))
    encoder = _FixedText({"a": [1.0, 0.0], "b": [0.0, 1.0]})
    with pytest.raises(ConfigError, match="needs at least two classes, got 1"):
        classify_slide(store, encoder, ["a"])
    with pytest.raises(ConfigError, match="two classes have the same name"):
        classify_slide(store, encoder, ["a", "a"])


def test_prompts_from_another_embedding_space_are_refused():
    from medvl_engine.errors import DataError

    with pytest.raises(DataError, match=r"shape \(1, 3\) do not match .* 2 dimensions"):
        similarity_map(_store(), torch.ones(1, 3))
    with pytest.raises(DataError, match="do not match"):
        similarity_map(_store(), torch.ones(1, 4))  # 4 = 2 x 2 must not be reshaped silently


def test_partial_map_keeps_the_full_grid_and_normalises_known_patches_only():
    known = np.array([True, False, True, False])
    heatmap = similarity_map(_store(), torch.tensor([[1.0, 0.0]]), normalize="minmax", known=known)
    # known scores 1.0 and 0.6 min-max to 1 and 0; the others are NaN on the same 2 x 2 grid
    np.testing.assert_allclose(heatmap.scores[known], [1.0, 0.0], atol=1e-6)
    assert np.isnan(heatmap.scores[~known]).all()
    assert heatmap.grid.shape == (2, 2)
    np.testing.assert_allclose(heatmap.grid, [[1.0, np.nan], [0.0, np.nan]], atol=1e-6)
    assert heatmap.value_range == (0.0, 1.0)
    boxes, scores = top_patches(_store(), heatmap.scores, n=4)
    assert len(boxes) == 2  # unknown patches never rank
    with pytest.raises(ValueError, match="known marks 3 patches"):
        similarity_map(_store(), torch.tensor([[1.0, 0.0]]), known=np.ones(3, bool))
