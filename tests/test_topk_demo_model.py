"""The demo TopKSigLIP model: packaged recipe, cache folder, training on first use."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from _topk_helpers import tiny_model
from medvl_engine.errors import ModelNotFoundError
from medvl_engine.models.topksiglip import (
    load_topksiglip,
    registered_model_dir,
    resolve_model,
    save_topksiglip,
)
from medvl_engine.training import _topksiglip_demo

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]


def test_packaged_recipe_is_the_demo_yaml():
    loaded = yaml.safe_load((REPO / "train" / "topksiglip_demo.yaml").read_text(encoding="utf-8"))
    assert loaded == _topksiglip_demo.DEMO_CONFIG
    assert loaded["task"]["install_as"] == "topksiglip-demo"


def test_demo_name_resolves_in_the_cache_from_any_directory(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MEDVL_CACHE", str(cache))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ModelNotFoundError, match=str(cache / "models" / "topksiglip-demo-v2")):
        resolve_model("topksiglip-demo")
    save_topksiglip(tiny_model(tmp_path), registered_model_dir("topksiglip-demo"))
    assert resolve_model("topksiglip-demo") == cache / "models" / "topksiglip-demo-v2"
    assert load_topksiglip("topksiglip-demo").config.grid == 8


def _tiny_recipe() -> dict:
    """The demo recipe shrunk to seconds: 4 + 2 small breasts, one epoch, a tiny ConvNeXt."""
    recipe = copy.deepcopy(_topksiglip_demo.DEMO_CONFIG)
    recipe["run"].update(epochs=1, warmup_steps=0, log_every=1)
    recipe["task"].update(
        synthetic_train=4,
        synthetic_eval=2,
        synthetic_size=[160, 112],
        batch_size=2,
        vision_depths=[1, 1, 1, 1],
        vision_hidden_sizes=[8, 16, 32, 64],
        image_size=128,
        grid=4,
        k=2,
        embed_dim=16,
    )
    return recipe


def test_demo_scene_trains_the_missing_demo_model_into_the_cache(tmp_path, monkeypatch):
    from medvl_engine import demo

    cache = tmp_path / "cache"
    monkeypatch.setenv("MEDVL_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_topksiglip_demo, "DEMO_CONFIG", _tiny_recipe())
    messages: list[str] = []
    demo._ensure_demo_topk_model("topksiglip-demo", messages.append)
    folder = cache / "models" / "topksiglip-demo-v2"
    model = load_topksiglip("topksiglip-demo")
    assert (model.config.image_size, model.config.grid, int(model.train_forwards)) == (128, 4, 2)
    assert (cache / "runs" / "topksiglip-demo" / "final").is_dir()
    assert not (tmp_path / "runs").exists()  # nothing lands in the working directory
    assert str(folder) in messages[0]
    assert any("batch 1/2" in m for m in messages)
    assert any("held-out evaluation: auroc_cancer" in m for m in messages)
    assert messages[-1].endswith(f"installed in {folder}")
    messages.clear()
    demo._ensure_demo_topk_model("topksiglip-demo", messages.append)  # present: no training
    assert messages == []
