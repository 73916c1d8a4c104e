"""Model lists for the pickers: registry names, then model folders on disk by model_type."""

from __future__ import annotations

import json

import pytest

from medvl_engine.model_folders import list_models, topk_candidates


@pytest.fixture(scope="module")
def cache(tmp_path_factory, tiny_topk_folder):
    root = tmp_path_factory.mktemp("cache")
    topk = tiny_topk_folder(root / "models")  # models/tiny-topk
    trained = root / "runs" / "limit-run" / "best"
    trained.mkdir(parents=True)
    (trained / "config.json").write_text(json.dumps({"model_type": "medvl-demo"}))
    junk = root / "models" / "notes"
    junk.mkdir()
    (junk / "config.json").write_text("not json")
    return root, topk


def test_topksiglip_list_holds_the_registry_then_topk_folders_only(cache):
    root, topk = cache
    choices = list_models("topksiglip", cache=root)
    assert choices[0].value == "topksiglip-demo" and choices[0].registered
    on_disk = [c for c in choices if not c.registered]
    assert [(c.label, c.value) for c in on_disk] == [("models/tiny-topk", str(topk))]


def test_encoder_list_holds_the_registry_then_other_model_folders(cache):
    root, _ = cache
    choices = list_models("encoder", cache=root)
    names = [c.value for c in choices if c.registered]
    assert names[0] == "medvl-demo" and "plip" in names
    assert [c.label for c in choices if not c.registered] == ["runs/limit-run/best"]
    with pytest.raises(ValueError, match="family must be one of"):
        list_models("audio", cache=root)


def test_candidates_come_from_the_config(cache, tmp_path):
    _, topk = cache
    assert topk_candidates(topk) == 64  # the tiny model's 8 x 8 grid
    assert topk_candidates(tmp_path / "missing") is None
