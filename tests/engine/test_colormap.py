"""Shared colour maps: a perceptually ordered sequential map and a blue-white-red diverging map."""

from __future__ import annotations

import numpy as np
import pytest

from medvl_engine.colormaps import (
    DIVERGING_MAP,
    SEQUENTIAL_MAP,
    apply_colormap,
    colormap_for,
    colormap_lut,
    display_limits,
    is_signed,
    resolve_colormap,
)


def _lightness(rgb: np.ndarray) -> np.ndarray:
    """CIE L* of sRGB colours [..., 3] in [0, 1]."""
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    y = linear @ np.array([0.2126, 0.7152, 0.0722])
    return np.where(y > 0.008856, 116 * np.cbrt(y) - 16, 903.3 * y)


def test_lut_shape_range_and_alpha() -> None:
    for name in (SEQUENTIAL_MAP, DIVERGING_MAP, "jet", "coolwarm", "gray"):
        lut = colormap_lut(name, 64)
        assert lut.shape == (64, 4) and lut.dtype == np.float32
        assert lut.min() >= 0.0 and lut.max() <= 1.0
        np.testing.assert_array_equal(lut[:, 3], 1.0)


def test_sequential_map_lightness_rises_monotonically() -> None:
    lightness = _lightness(colormap_lut(SEQUENTIAL_MAP, 256)[:, :3].astype(np.float64))
    assert np.all(np.diff(lightness) > 0)
    assert lightness[-1] - lightness[0] > 60


def test_diverging_map_is_white_at_centre_blue_low_red_high() -> None:
    lut = colormap_lut(DIVERGING_MAP, 257)
    np.testing.assert_allclose(lut[128, :3], 1.0)
    low, high = lut[0, :3], lut[-1, :3]
    assert low[2] > low[0] and high[0] > high[2]
    lightness = _lightness(lut[:, :3].astype(np.float64))
    assert np.all(np.diff(lightness[:129]) > 0) and np.all(np.diff(lightness[128:]) < 0)


def test_apply_colormap_matches_the_lut() -> None:
    values = np.linspace(0, 1, 256, dtype=np.float32)
    rgb = apply_colormap(values, SEQUENTIAL_MAP)
    expected = np.clip(colormap_lut(SEQUENTIAL_MAP, 256)[:, :3] * 255 + 0.5, 0, 255)
    np.testing.assert_array_equal(rgb, expected.astype(np.uint8))
    np.testing.assert_array_equal(apply_colormap(np.array([np.nan, -3.0, 9.0]))[:2], rgb[[0, 0]])


def test_signed_data_get_the_diverging_map_and_symmetric_limits() -> None:
    assert colormap_for(True) == DIVERGING_MAP and colormap_for(False) == SEQUENTIAL_MAP
    assert is_signed("contrast", (-0.227, -0.005))
    assert is_signed("cosine", (-0.1, 0.3))
    assert not is_signed("cosine", (0.05, 0.3)) and not is_signed("softmax", (0.0, 1.0))
    assert display_limits((-0.227, -0.005), True) == (-0.227, 0.227)
    assert display_limits((-0.1, 0.3), True) == (-0.3, 0.3)
    assert display_limits((0.1, 0.3), False) == (0.1, 0.3)
    assert display_limits((0.0, 0.0), True) == (-1.0, 1.0)


def test_auto_and_named_maps_resolve() -> None:
    assert resolve_colormap(None, signed=True) == DIVERGING_MAP
    assert resolve_colormap("auto", signed=False) == SEQUENTIAL_MAP
    assert resolve_colormap("jet", signed=True) == "jet"
    with pytest.raises(ValueError, match="unknown colormap 'turbo-x'"):
        resolve_colormap("turbo-x", signed=False)
