"""A feature store and a heatmap written by release 0.1.0 open, and give the same map today."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medvl_engine.cli.main import main
from medvl_engine.features import FeatureStore
from medvl_engine.io.slide import open_slide
from medvl_engine.pathology import final, prompt_heatmap

SAVED = Path(__file__).parent / "release_0_1_0"
SLIDE = SAVED / "slide-seed0.tiff"
STORE = SAVED / "slide-seed0.zarr"
HEATMAP = SAVED / "heatmap-tumor.npz"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_saved_store_opens_with_its_patches_and_grid():
    store = FeatureStore.open(STORE)
    assert (store.n_patches, store.embed_dim) == (4, 256)
    saved = np.load(HEATMAP)
    np.testing.assert_array_equal(np.asarray(store.coords), saved["coords"])


def test_medvl_heatmap_on_the_saved_store_writes_the_saved_map(tmp_path):
    out = tmp_path / "heatmap.npz"
    assert main(["heatmap", str(SLIDE), "--features", str(STORE), "--prompt", "tumor",
                 "--model", "medvl-demo", "--out", str(out)]) == 0  # fmt: skip
    today, saved = np.load(out), np.load(HEATMAP)
    assert sorted(today.files) == sorted(saved.files)
    for key in saved.files:
        if np.issubdtype(saved[key].dtype, np.floating):
            # scores from the text tower's float32 arithmetic: equal to a float32's
            # last digit, which varies with the torch and transformers builds
            np.testing.assert_allclose(today[key], saved[key], rtol=0, atol=1e-6, err_msg=key)
            assert today[key].dtype == saved[key].dtype, key
        else:
            np.testing.assert_array_equal(today[key], saved[key], err_msg=key)


def test_the_engine_call_scores_the_saved_store_as_release_0_1_0_did():
    with open_slide(SLIDE) as slide:
        result = final(prompt_heatmap(slide, "tumor", "medvl-demo", features=STORE))
    assert not result.extracted
    np.testing.assert_allclose(result.scores, np.load(HEATMAP)["scores"], atol=1e-6)
