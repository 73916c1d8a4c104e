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
