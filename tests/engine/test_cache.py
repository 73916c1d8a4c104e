"""One cache folder for the engine and the plugin: ``$MEDVL_CACHE``, else ``~/.cache/medvl``."""

from __future__ import annotations

from pathlib import Path

from medvl_engine.common.cache import cache_dir


def test_cache_dir_is_medvl_cache_joined_with_parts_and_created_only_on_request(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache"
    assert cache_dir("features") == tmp_path / "cache" / "features"
    assert not (tmp_path / "cache").exists()

    made = cache_dir("samples", "v1", create=True)
    assert made == tmp_path / "cache" / "samples" / "v1" and made.is_dir()


def test_cache_dir_defaults_to_the_home_cache_and_expands_a_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MEDVL_CACHE", raising=False)
    assert cache_dir("models") == tmp_path / ".cache" / "medvl" / "models"

    monkeypatch.setenv("MEDVL_CACHE", "~/elsewhere")
    assert cache_dir() == tmp_path / "elsewhere"


def test_plugin_sample_data_and_feature_stores_live_in_the_engine_cache(tmp_path, monkeypatch):
    from napari_medvl._heatmap_job import FeatureCache

    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path))
    folder = FeatureCache().folder()
    assert folder == Path(tmp_path) / "features" and folder.is_dir()
