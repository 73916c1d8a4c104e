"""LIMIT zero-shot classification with attention: hand-computed alpha, scores equal to
classify_slide, presets, the attention map's grid and placement, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from medvl_engine.errors import ConfigError
from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import classify_slide
from medvl_engine.slide_classification import (
    CLASS_PRESETS,
    attention_heatmap,
    classify_with_attention,
    preset_prompts,
)

FEATURES = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
COORDS = np.array([[0, 0], [10, 0], [20, 10]], dtype=np.int64)


class _FixedText:
    """Stands in for an encoder: maps each prompt to a fixed unit vector."""

    def __init__(self, table):
        self.table = table

    def encode_text(self, texts):
        rows = torch.tensor([self.table[t] for t in texts], dtype=torch.float32)
        return torch.nn.functional.normalize(rows, dim=-1)


ENCODER = _FixedText({"a": [1.0, 0.0], "b": [0.0, 1.0], "b2": [0.0, 1.0]})


def _store(mpp=None):
    return FeatureStore(FEATURES, COORDS, patch_size_level0=10, patch_size=10, mpp=mpp)


def test_attention_and_scores_follow_the_equations_by_hand():
    store = _store()
    result = classify_with_attention(store, ENCODER, ["b", "a"], tau_attn=1.0)
    e = math.e
    # query a: alpha = (e, e, 1) / (2e + 1); query b: alpha = (1, 1, e) / (2 + e)
    np.testing.assert_allclose(result.attention[1], np.array([e, e, 1]) / (2 * e + 1), rtol=1e-6)
    np.testing.assert_allclose(result.attention[0], np.array([1, 1, e]) / (2 + e), rtol=1e-6)
    assert result.predicted == "a"
    reference = classify_slide(store, ENCODER, ["b", "a"], tau_attn=1.0)
    assert [name for name, _ in result.ranked] == [name for name, _ in reference]
    assert [s for _, s in result.ranked] == pytest.approx([s for _, s in reference], abs=1e-6)
    assert result.ranked[0][1] == pytest.approx(2 * e / math.hypot(2 * e, 1), abs=1e-6)


def test_attention_map_is_alpha_times_n_on_the_store_grid():
    store = _store(mpp=(0.5, 0.5))
    result = classify_with_attention(store, ENCODER, {"A": ["a"], "B": ["b", "b2"]}, tau_attn=1.0)
    heatmap = attention_heatmap(store, result, "A")
    e = math.e
    expected = np.array([e, e, 1]) / (2 * e + 1) * 3
    np.testing.assert_allclose(heatmap.scores, expected, rtol=1e-6)
    # patches at (0,0) (10,0) (20,10) on 10 px cells: grid 2 rows x 3 cols, NaN where none
    assert heatmap.grid.shape == (2, 3)
    np.testing.assert_allclose(heatmap.grid[0, :2], expected[:2], rtol=1e-6)
    assert heatmap.grid[1, 2] == pytest.approx(expected[2])
    assert np.isnan(heatmap.grid[1, 0]) and np.isnan(heatmap.grid[0, 2])
    assert heatmap.scale == (5.0, 5.0) and heatmap.translate == (2.5, 2.5)
    assert heatmap.units == "um" and heatmap.mode == "attention" and heatmap.prompt == "A"
    assert heatmap.value_range == pytest.approx((0.0, expected.max()))
    with pytest.raises(ConfigError, match="'C' is not one of the classified classes"):
        attention_heatmap(store, result, "C")


def test_presets_and_bad_requests():
    assert preset_prompts("breast (SPIDER-C)")[0] == "breast tumor"
    assert "colorectal mucin" in CLASS_PRESETS["colorectal (SPIDER-C)"]
    assert len(CLASS_PRESETS["skin (SPIDER-C)"]) == 9
    with pytest.raises(ConfigError, match="not a class preset; use one of: breast"):
        preset_prompts("liver")
    with pytest.raises(ConfigError, match="at least two classes"):
        classify_with_attention(_store(), ENCODER, ["a"])
    with pytest.raises(ConfigError, match="same name"):
        classify_with_attention(_store(), ENCODER, ["a", "a"])
    with pytest.raises(ConfigError, match="temperature must be positive"):
        classify_with_attention(_store(), ENCODER, ["a", "b"], tau_attn=0.0)
