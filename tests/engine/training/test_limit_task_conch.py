"""LIMIT with CONCH's text tower (the Conch-Z recipe) on a stand-in `conch` package and a tiny
CONCH v1.5 vision tower folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from medvl_engine.errors import MissingDependencyError
from medvl_engine.tasks.limit.task import LimitTask, LimitTaskConfig
from medvl_engine.tasks.limit.tower import load_trainable_text_tower
from medvl_engine.training import RunConfig, train

REPORTS = {
    "tumor": "Sections show invasive carcinoma.",
    "fat": "Adipose tissue is present. No tumor.",
    "stroma": "Fibrous stroma with lymphocytes is seen.",
}
PROMPTS = ["invasive carcinoma", "adipose tissue"]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory, write_conch_checkpoint, write_feature_store, conch_v15_dim):
    """Nine slides of CONCH v1.5-wide (768) features in three report classes, two organs."""
    root = tmp_path_factory.mktemp("conchz")
    rng = np.random.default_rng(0)
    centres = {name: rng.normal(size=conch_v15_dim) for name in REPORTS}
    rows = []
    for index in range(9):
        label = list(REPORTS)[index % 3]
        features = centres[label] + 0.3 * rng.normal(size=(int(rng.integers(4, 12)), conch_v15_dim))
        write_feature_store(root / f"s{index}.zarr", features, slide=f"s{index}")
        rows.append(
            {
                "slide_id": f"s{index}",
                "organ": "lung" if index % 2 else "breast",
                "report": REPORTS[label],
                "features": f"s{index}.zarr",
                "split": "test" if index >= 7 else "train",
                "label": label,
            }
        )
    (root / "manifest.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    write_conch_checkpoint(root / "CONCH")
    return root


@pytest.fixture(scope="session")
def limit_task(install_fake_conch, write_conch_v15_folder):
    """``limit_task(root, tmp_path, monkeypatch, **overrides)`` -> (LimitTask, RunConfig) of one
    step with the stand-in CONCH text tower and a tiny CONCH v1.5 folder."""

    def _task(root, tmp_path, monkeypatch, **overrides) -> tuple[LimitTask, RunConfig]:
        install_fake_conch(monkeypatch)
        titan = write_conch_v15_folder(tmp_path / "conch15")
        values = dict(
            manifest=str(root / "manifest.jsonl"),
            text_model=str(root / "CONCH"),
            vision_encoder=str(titan),
            num_negatives=2,
            val_fraction=0.0,
            eval_bootstrap=0,
        )
        values.update(overrides)
        run = RunConfig(
            lr=1e-3, epochs=1, max_steps=1, out_dir=str(tmp_path / "run"), progress=False
        )
        return LimitTask(LimitTaskConfig(**values), run), run

    return _task


def test_conch_text_model_without_the_package_fails_at_once(cohort, monkeypatch):
    monkeypatch.setitem(sys.modules, "conch", None)
    for spec in ("conch-v1", str(cohort / "CONCH"), str(cohort / "CONCH" / "pytorch_model.bin")):
        with pytest.raises(MissingDependencyError, match="pip install git\\+https://github.com/"):
            load_trainable_text_tower(spec)


def test_registry_name_conch_v1_gives_its_text_tower(
    cohort, monkeypatch, install_fake_conch, conch_embed_dim
):
    import medvl_engine.encoders._hub as hub

    install_fake_conch(monkeypatch)
    monkeypatch.setattr(hub, "resolve_model_dir", lambda source, *args: cohort / "CONCH")
    tower = load_trainable_text_tower("conch-v1")
    assert tower.training and tower.output_dim == conch_embed_dim
    assert all(p.requires_grad for p in tower.parameters())
    with torch.no_grad():
        by_name = tower.encode(PROMPTS)
        by_file = load_trainable_text_tower(str(cohort / "CONCH" / "pytorch_model.bin")).encode(
            PROMPTS
        )
    assert by_name.shape == (2, conch_embed_dim) and torch.allclose(by_name, by_file)


def test_one_step_updates_only_the_text_side_and_the_folder_loads_back(
    cohort, tmp_path, monkeypatch, conch_v15_dim, limit_task
):
    from medvl_engine.encoders import load_encoder
    from medvl_engine.models.limit import load_limit_model

    task, _ = limit_task(cohort, tmp_path, monkeypatch)
    model = task.build_model()
    tower = model.text_tower
    # CONCH's 512-d projection composed with the new map to 768: one Linear(width, 768)
    assert (tower.projection.in_features, tower.projection.out_features) == (32, conch_v15_dim)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    batch = next(iter(task.train_batches(0, 0, 1)))
    assert batch["features"].shape[0] == 3 and batch["features"].shape[2] == conch_v15_dim
    loss = task.compute_losses(model, batch)["loss"]
    loss.backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(name.startswith("text_tower.") for name in changed)
    assert "text_tower.projection.weight" in changed
    assert any(".transformer.resblocks." in name for name in changed)  # full fine-tuning

    task.save_pretrained(model, tmp_path / "tuned")
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert config["text_config"]["model_type"] == "medvl-conch-text"
    assert config["vision_encoder"] == str(tmp_path / "conch15")
    model.eval()
    with torch.no_grad():
        expected = model.encode_texts(PROMPTS)
        reloaded = load_trainable_text_tower(str(tmp_path / "tuned")).eval()
        assert torch.allclose(torch.nn.functional.normalize(reloaded.encode(PROMPTS)), expected)
        assert torch.allclose(load_limit_model(tmp_path / "tuned").encode_texts(PROMPTS), expected)
    paired = load_encoder(tmp_path / "tuned")
    assert torch.allclose(paired.encode_text(PROMPTS), expected, atol=1e-6)
    rng = np.random.default_rng(0)
    patches = rng.integers(0, 256, size=(2, 64, 64, 3), dtype=np.uint8)
    assert paired.encode_patches(patches).shape == (2, conch_v15_dim)
    monkeypatch.setitem(sys.modules, "conch", None)
    with pytest.raises(MissingDependencyError, match="CONCH text tower in .*tuned"):
        load_trainable_text_tower(str(tmp_path / "tuned"))


def test_conchz_recipe_keeps_the_paper_settings_and_runs(
    cohort, tmp_path, monkeypatch, install_fake_conch, conch_v15_dim
):
    import medvl_engine.encoders._hub as hub
    from medvl_engine.training.config import load_config

    recipe = Path(__file__).resolve().parents[3] / "train" / "limit_conchz.yaml"
    overrides = [
        f"task.manifest={cohort / 'manifest.jsonl'}",
        f"run.out_dir={tmp_path / 'run'}",
        "run.max_steps=1",
        "run.progress=false",
        "task.num_negatives=2",
        "task.eval_bootstrap=0",
    ]
    run, config = load_config(recipe, overrides, LimitTaskConfig)
    assert (run.lr, run.weight_decay, run.epochs, run.schedule) == (1e-5, 1e-5, 3, "cosine")
    assert (config.text_model, config.vision_encoder) == ("conch-v1", "conch-v1.5")
    assert (config.loss, config.tau_nce, config.val_fraction) == ("weighted_infonce", 0.07, 0.01)
    assert config.finetune == "full" and config.max_text_length == 127

    install_fake_conch(monkeypatch)
    monkeypatch.setattr(hub, "resolve_model_dir", lambda source, *args: cohort / "CONCH")
    summary = train(LimitTask(config, run), run)
    assert summary["steps"] == 1 and np.isfinite(summary["losses"]).all()
    saved = json.loads((tmp_path / "run" / "final" / "config.json").read_text())
    assert saved["vision_encoder"] == "conch-v1.5" and saved["projection"]["out_features"] == 768
    tower = load_trainable_text_tower(str(tmp_path / "run" / "final"))
    assert tower.output_dim == conch_v15_dim and tower.encode(PROMPTS).shape == (2, conch_v15_dim)
