"""The DICOM grayscale pipeline functions against values worked out by hand from PS3.3 C.11."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medvl_engine.io.mammo import _voi


def test_linear_window_hand_values():
    # c = 40, w = 400: x <= -160 -> 0, x > 239 -> 1, else (x - 39.5) / 399 + 0.5
    x = np.array([-1000, -160, -159, 39.5, 239, 240])
    expected = [0.0, 0.0, -198.5 / 399 + 0.5, 0.5, 1.0, 1.0]
    assert _voi.voi_linear(x, 40, 400) == pytest.approx(expected)
    # 12-bit full window c = 2048, w = 4096: 0 -> 0, 2047.5 -> 0.5, 4095 -> 1
    assert _voi.voi_linear(np.array([0, 2047.5, 4095]), 2048, 4096) == pytest.approx([0, 0.5, 1])


def test_linear_window_of_width_one_is_a_threshold():
    assert _voi.voi_linear(np.array([9, 9.5, 9.6, 11]), 10, 1).tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="below 1"):
        _voi.voi_linear(np.array([1.0]), 10, 0.5)


def test_linear_exact_window_hand_values():
    # c = 40, w = 400: x <= -160 -> 0, x > 240 -> 1, else (x - 40) / 400 + 0.5
    x = np.array([-160, -159, 40, 240, 241])
    assert _voi.voi_linear_exact(x, 40, 400) == pytest.approx([0, 0.0025, 0.5, 1.0, 1.0])


def test_sigmoid_window_hand_values():
    # y = 1 / (1 + exp(-4 (x - c) / w)); c = 40, w = 400
    x = np.array([40, 140, -60])
    expected = [0.5, 1 / (1 + math.exp(-1)), 1 / (1 + math.exp(1))]
    assert _voi.voi_sigmoid(x, 40, 400) == pytest.approx(expected)
    assert _voi.voi_window(x, 40, 400, "SIGMOID") == pytest.approx(expected)


def test_window_function_names_and_default():
    x = np.array([0.0, 100.0])
    assert _voi.voi_window(x, 50, 101, None) == pytest.approx(_voi.voi_linear(x, 50, 101))
    assert _voi.voi_window(x, 50, 100, "linear_exact ") == pytest.approx([0.0, 1.0])
    with pytest.raises(ValueError, match="GAMMA"):
        _voi.voi_window(x, 50, 100, "GAMMA")


def test_lut_lookup_clamps_outside_the_mapped_range():
    # 4 entries, first mapped value 10, 8-bit entries
    descriptor, table = (4, 10, 8), [0, 85, 170, 255]
    x = np.array([5, 10, 11, 12, 13, 100])
    assert _voi.apply_lut(x, descriptor, table).tolist() == [0, 0, 85, 170, 255, 255]
    assert _voi.voi_lut(x, descriptor, table) == pytest.approx([0, 0, 1 / 3, 2 / 3, 1, 1])


def test_rescale_and_monochrome1_inversion():
    assert _voi.rescale(np.array([0, 10]), 2.0, -1024).tolist() == [-1024, -1004]
    assert _voi.invert_monochrome1(np.array([0.0, 0.25, 1.0])).tolist() == [1.0, 0.75, 0.0]
    assert _voi.full_range_window(np.array([100, 150, 300])) == pytest.approx([0, 0.25, 1])
    assert _voi.full_range_window(np.array([7, 7])).tolist() == [0, 0]


@pytest.mark.parametrize("function", ["LINEAR", "LINEAR_EXACT", "SIGMOID"])
def test_windows_that_are_not_numbers_raise_instead_of_giving_nan(function):
    x = np.array([0.0, 100.0])
    for center, width in ((50.0, math.nan), (math.nan, 100.0), (50.0, -math.inf)):
        with pytest.raises(ValueError, match="window"):
            _voi.voi_window(x, center, width, function)


def test_rescale_by_a_non_finite_number_raises_instead_of_giving_nan():
    with pytest.raises(ValueError, match="finite"):
        _voi.rescale(np.array([1, 2]), math.nan, 0.0)
    with pytest.raises(ValueError, match="finite"):
        _voi.rescale(np.array([1, 2]), 1.0, math.inf)
