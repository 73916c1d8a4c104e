"""Sample data contributions: generated once into the cache, then opened as layers."""

from __future__ import annotations

import numpy as np
import pytest
from napari.components import ViewerModel

from napari_medvl import _sample_data


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path))
    return tmp_path


def test_sample_slide_is_generated_once_and_opens_in_micrometres(cache):
    import npe2

    npe2.PluginManager.instance().discover()
    viewer = ViewerModel()
    layers = viewer.open_sample("napari-medvl", "synthetic-he-slide")
    assert len(layers) == 1
    layer = layers[0]
    assert layer.rgb and layer.multiscale
    assert layer.data[0].shape == (3072, 4096, 3)
    np.testing.assert_allclose(layer.scale, [0.5, 0.5])
    path = _sample_data.ensure_sample_slide()
    stamp = path.stat().st_mtime_ns
    assert _sample_data.ensure_sample_slide() == path
    assert path.stat().st_mtime_ns == stamp  # reused, not rewritten
    assert not [p for p in (cache / "samples").iterdir() if p.name.startswith(".")]


def test_sample_mammograms_open_as_named_views_side_by_side(cache):
    layer_data = _sample_data.synthetic_mammograms()
    names = [kwargs["name"] for _, kwargs, _ in layer_data]
    assert names == ["L CC", "L MLO"]
    (cc, cc_kwargs, _), (_, mlo_kwargs, _) = layer_data
    assert cc.dtype == np.float32 and 0.0 <= cc.min() and cc.max() <= 1.0
    assert mlo_kwargs["translate"][1] > cc.shape[1]


def test_sample_exam_hangs_four_views_of_one_patient_with_chest_walls_facing(cache):
    import npe2

    from medvl_engine.io.mammo import check_pair

    npe2.PluginManager.instance().discover()
    viewer = ViewerModel()
    layers = viewer.open_sample("napari-medvl", "synthetic-exam")
    by_name = {layer.name: layer for layer in layers}
    assert sorted(by_name) == ["L CC", "L MLO", "R CC", "R MLO"]
    for laterality in ("L", "R"):  # each side's views form a valid pair
        check_pair(
            by_name[f"{laterality} CC"].metadata["mammogram"],
            by_name[f"{laterality} MLO"].metadata["mammogram"],
        )
    for name, layer in by_name.items():
        h, w = layer.data.shape
        corners = np.array([layer.data_to_world(p) for p in ((-0.5, -0.5), (h - 0.5, w - 0.5))])
        left, right = corners[:, 1].min(), corners[:, 1].max()
        top = corners[:, 0].min()
        assert (right <= 0) if name.startswith("R") else (left >= 0), name  # R left of midline
        assert (top == 0) if name.endswith("CC") else (top > 0), name  # CC above MLO
        # the chest wall (edge column with more tissue) is the one nearer the midline
        edge = 0 if layer.data[:, 0].mean() > layer.data[:, -1].mean() else w - 1
        wall_x = abs(layer.data_to_world((0, edge))[1])
        nipple_x = abs(layer.data_to_world((0, w - 1 - edge))[1])
        assert wall_x < nipple_x, name
