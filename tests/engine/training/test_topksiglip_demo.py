"""The demo TopKSigLIP model: packaged recipe, shipped folder, registry, rebuild, test metrics."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from medvl_engine import demo_models
from medvl_engine.encoders.resolve import registered_model_dir, resolve_topksiglip
from medvl_engine.errors import ModelNotFoundError
from medvl_engine.models.topksiglip_folder import load_topksiglip, save_topksiglip
from medvl_engine.tasks.topksiglip import demo_recipe as _topksiglip_demo
from medvl_engine.training.checkpoint import load_checkpoint, save_checkpoint
from medvl_engine.training.registry import recipe_path

torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[3]
SHIPPED = demo_models.SHIPPED_ROOT / "topksiglip-demo"
METRIC_TOLERANCE = 1e-6
"""Shipped weights scored again here against the card: same weights, same breasts."""
REBUILD_TOLERANCE = {"auroc_cancer": 0.07, "pointing_game": 0.08}
"""A rebuild from scratch on another machine is a new draw, like another seed: at least two
standard deviations of the difference of two seeds (2 sqrt(2) x the std over seeds 0-2 that
``medvl-train topksiglip eval ... run.seeds=[0,1,2]`` printed, 0.022 and 0.014: 0.062 and 0.040),
rounded up; about the width of the card's 95% bootstrap interval for cancer AUROC
(0.901-0.973) and half of it for the Pointing Game (0.757-0.894)."""


def test_packaged_recipe_is_the_demo_yaml():
    shown = REPO / "train" / "topksiglip_demo.yaml"  # where users look: a link to the package's
    packaged = recipe_path("topksiglip", _topksiglip_demo.RECIPE)
    assert shown.resolve() == packaged.resolve()
    assert packaged.parent == Path(_topksiglip_demo.__file__).parent / "recipes"
    loaded = yaml.safe_load(packaged.read_text(encoding="utf-8"))
    assert loaded == _topksiglip_demo.demo_config()
    task = _topksiglip_demo.flat_task_settings(loaded)
    assert "install_as" not in task  # the demo is shipped, never installed over
    assert task["synthetic_test"] > 0


def test_demo_name_resolves_to_the_shipped_folder_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    resolved = resolve_topksiglip("topksiglip-demo")
    assert (resolved.path, resolved.kind, resolved.shipped) == (SHIPPED, "medvl-topksiglip", True)
    model = load_topksiglip("topksiglip-demo")
    assert (model.config.image_size, model.config.grid, model.config.k) == (256, 8, 4)
    assert demo_models.demo_notice_for("topksiglip-demo") == demo_models.DEMO_NOTICE
    assert demo_models.demo_notice_for(SHIPPED) == demo_models.DEMO_NOTICE
    assert not (tmp_path / "empty-cache").exists()  # nothing trained, nothing cached


def test_folder_with_the_former_loss_keys_loads_and_ignores_them(tmp_path):
    folder = tmp_path / "older-demo"
    shutil.copytree(SHIPPED, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    former = {"objective": "sigmoid", "target": "tabular", "roi_supervision": True}
    (folder / "config.json").write_text(
        json.dumps({**config, **former, "dice_weight": 5.0}), encoding="utf-8"
    )
    model = load_topksiglip(folder)
    assert not any(hasattr(model.config, key) for key in ("objective", "dice_weight"))
    assert model.config.grid == config["grid"]


def test_shipped_folder_is_small_and_stores_only_the_trained_parts():
    files = {path.name for path in SHIPPED.iterdir()}
    assert {"config.json", "model.safetensors", "MODEL_CARD.md"} <= files
    assert not files & {"vocab.txt", "tokenizer.json"}  # the tokenizer is referenced
    size = sum(path.stat().st_size for path in SHIPPED.iterdir())
    assert size < 10 * 2**20
    config = json.loads((SHIPPED / "config.json").read_text(encoding="utf-8"))
    assert config["synthetic_demo"] is True
    assert config["text_reference"] == "all-MiniLM-L6-v2"
    # the shipped folder's recipe resolves to the packaged one (written flat before sections)
    recipe = _topksiglip_demo.demo_config()
    assert config["recipe"]["run"] == recipe["run"]
    flat = _topksiglip_demo.flat_task_settings
    assert flat(config["recipe"]) == flat(recipe)
    card = (SHIPPED / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "not for diagnosis" in card and "make demo-models" in card
    assert _topksiglip_demo.EVAL_COMMAND in card
    assert f"commit: `{config['commit']}`" in card


def test_missing_shipped_folder_names_the_rebuild_command(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_models, "SHIPPED_ROOT", tmp_path / "nothing-here")
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelNotFoundError, match="make demo-models"):
        resolve_topksiglip("topksiglip-demo")
    assert not (tmp_path / "cache").exists()


def test_install_as_uses_the_cache_under_its_own_name(tmp_path, monkeypatch, tiny_topk_model):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError, match="not found"):
        resolve_topksiglip("my-topk")
    save_topksiglip(tiny_topk_model(tmp_path), registered_model_dir("my-topk"))
    resolved = resolve_topksiglip("my-topk")
    assert resolved.path == tmp_path / "cache" / "models" / "my-topk"
    assert resolved.kind == "medvl-topksiglip" and not resolved.shipped
    assert load_topksiglip("my-topk").config.grid == 8
    with pytest.raises(ModelNotFoundError, match="shipped demo model"):
        registered_model_dir("topksiglip-demo")
    with pytest.raises(ModelNotFoundError, match="plain name"):
        registered_model_dir("../elsewhere")


def test_frozen_minilm_tower_saved_by_reference_loads_back_identically(
    tmp_path, tiny_topk_model, tiny_minilm_topk_model
):
    model = tiny_minilm_topk_model(tmp_path).eval()
    folder = save_topksiglip(
        model, tmp_path / "by-reference", text_by_reference=True, extra_config={"x": 1}
    )
    names = {path.name for path in folder.iterdir()}
    assert names == {"config.json", "model.safetensors"}
    assert (folder / "model.safetensors").stat().st_size < 2**20  # MiniLM alone is ~90 MB
    assert json.loads((folder / "config.json").read_text())["x"] == 1
    loaded = load_topksiglip(folder)
    texts = ["Biopsy confirms the presence of cancer.", "The breast is extremely dense."]
    images = torch.rand(2, 1, 256, 256, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model.encode_text(texts), loaded.encode_text(texts))
        assert torch.equal(
            model.encode_image(images, k=3).embedding, loaded.encode_image(images, k=3).embedding
        )
    with pytest.raises(ValueError, match="frozen"):
        save_topksiglip(tiny_topk_model(tmp_path), tmp_path / "clip", text_by_reference=True)


def test_folder_referencing_another_text_tower_is_refused(tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((SHIPPED / name).read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config["text_reference"] = "bert-base-uncased"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match="only 'all-MiniLM-L6-v2'"):
        load_topksiglip(folder)


def _tiny_recipe() -> dict:
    """The demo recipe shrunk to seconds: 8 + 10 + 8 small breasts, a tiny ConvNeXt (its
    task settings flat)."""
    recipe = _topksiglip_demo.demo_config()
    recipe["task"] = _topksiglip_demo.flat_task_settings(recipe)
    recipe["run"].update(epochs=2, warmup_steps=0, log_every=1)
    recipe["task"].update(
        synthetic_train=8,
        synthetic_eval=10,
        synthetic_test=8,
        synthetic_size=[160, 112],
        batch_size=4,
        vision_depths=[1, 1, 1, 1],
        vision_hidden_sizes=[8, 16, 32, 64],
        image_size=128,
        grid=4,
        k=2,
        embed_dim=16,
        lesion_pretrain_steps=4,
        scorer_pretrain_steps=4,
    )
    return recipe


@pytest.mark.slow  # trains and evaluates a tiny recipe twice (about 40 s)
def test_rebuild_writes_a_complete_demo_folder_with_its_test_metrics(tmp_path, monkeypatch):
    tiny = _tiny_recipe()
    monkeypatch.setattr(_topksiglip_demo, "demo_config", lambda: copy.deepcopy(tiny))
    messages: list[str] = []
    target = tmp_path / "shipped" / "topksiglip-demo"
    folder = _topksiglip_demo.rebuild_shipped(
        messages.append,
        target=target,
        work_dir=tmp_path / "work",
        fresh_cohorts=0,
    )
    assert folder == target
    assert {p.name for p in folder.iterdir()} == {
        "config.json",
        "model.safetensors",
        "MODEL_CARD.md",
    }
    config = json.loads((folder / "config.json").read_text())
    evaluation = json.loads((tmp_path / "work" / "test_evaluation.json").read_text())
    assert evaluation["test_breasts"] == 8
    printed = {k: v["value"] for k, v in evaluation["models"][0]["metrics"].items()}
    assert config["test_metrics"] == printed
    card = (folder / "MODEL_CARD.md").read_text()
    assert f"{printed['auroc_cancer']:.3f}" in card
    assert "test 8" in card and "not for diagnosis" in card
    assert "reading the image and its 3 and 5 px white top-hats" in card  # the recipe's input
    assert demo_models.demo_notice_for(folder) == demo_models.DEMO_NOTICE
    model = load_topksiglip(folder)
    assert (model.config.image_size, model.config.grid) == (128, 4)
    assert any("wrote" in m for m in messages)
    messages.clear()  # a second rebuild finds the finished run of the same recipe
    _topksiglip_demo.rebuild_shipped(
        messages.append,
        target=target,
        work_dir=tmp_path / "work",
        fresh_cohorts=0,
    )
    assert any("shipped as it is" in m for m in messages)
    assert not any("lesion pretraining" in m for m in messages)
    assert json.loads((folder / "config.json").read_text())["test_metrics"] == printed
    checkpoint = tmp_path / "work" / "checkpoint.pt"
    payload = load_checkpoint(checkpoint)  # a run saved before run.ema_decay existed
    del payload["config"]["run"]["ema_decay"]
    save_checkpoint(checkpoint, payload)
    recipe = _topksiglip_demo.build_recipe(tmp_path / "work")
    assert _topksiglip_demo.finished_with_recipe(tmp_path / "work", *recipe)
    tiny["task"]["k"] = 3  # another recipe: trains again
    assert not _topksiglip_demo.finished_with_recipe(
        tmp_path / "work", *_topksiglip_demo.build_recipe(tmp_path / "work")
    )


def _shipped_test_metrics(tmp_path: Path) -> dict[str, float]:
    """Point metrics of the shipped weights on the recipe's test breasts, computed the way the
    eval action computes them (same breasts, loader and readouts)."""
    from medvl_engine.data.mammo_dataset import MammoDataset, disk_cached_loader, load_breast
    from medvl_engine.tasks.topksiglip.cohorts import synthetic_records
    from medvl_engine.tasks.topksiglip.evaluation import model_readouts, readout_metrics

    task = _topksiglip_demo.flat_task_settings(_topksiglip_demo.demo_config())
    records = synthetic_records(
        tmp_path / "test",
        task["synthetic_test"],
        task["synthetic_seed"] + 2,
        "test",
        tuple(task["synthetic_size"]),
    )
    model = load_topksiglip("topksiglip-demo")
    loader = disk_cached_loader(tmp_path / "breasts", load_breast)
    dataset = MammoDataset(records, model.geometry, None, seed=0, loader=loader)
    table, _ = model_readouts(model, dataset)
    return readout_metrics(table)


def test_shipped_weights_reproduce_the_card_metrics_on_the_test_split(tmp_path):
    config = json.loads((SHIPPED / "config.json").read_text(encoding="utf-8"))
    metrics = _shipped_test_metrics(tmp_path)
    card = config["test_metrics"]
    assert set(card) == set(metrics)
    for key, value in card.items():
        assert metrics[key] == pytest.approx(value, abs=METRIC_TOLERANCE), key


@pytest.mark.slow
def test_rebuild_from_scratch_lands_within_the_stated_tolerance_of_the_card(tmp_path):
    config = json.loads((SHIPPED / "config.json").read_text(encoding="utf-8"))
    folder = _topksiglip_demo.rebuild_shipped(
        print, target=tmp_path / "topksiglip-demo", work_dir=tmp_path / "work", fresh_cohorts=0
    )
    rebuilt = json.loads((folder / "config.json").read_text(encoding="utf-8"))["test_metrics"]
    for key, tolerance in REBUILD_TOLERANCE.items():
        assert abs(rebuilt[key] - config["test_metrics"][key]) <= tolerance, key


def test_install_as_the_shipped_name_stops_before_training(tmp_path, capsys):
    from medvl_engine.cli.train import main as train_main

    config = str(Path(__file__).resolve().parents[3] / "train" / "topksiglip_demo.yaml")
    status = train_main(
        [
            "topksiglip",
            "--config",
            config,
            f"run.out_dir={tmp_path / 'run'}",
            "task.install_as=topksiglip-demo",
        ]
    )
    assert status == 2
    assert "shipped demo model and cannot be installed over" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
