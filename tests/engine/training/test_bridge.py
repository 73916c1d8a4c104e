"""The least-squares Conch-Z bridge: the untuned CONCH text tower already classifies v1.5
features when its 512 -> 768 map is fitted on patches embedded by both encoders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from medvl_engine.errors import ConfigError, DataError
from medvl_engine.tasks.limit.bridge import bridge_from_stores, fit_bridge
from medvl_engine.tasks.limit.task import LimitTask, LimitTaskConfig
from medvl_engine.tasks.limit.tower import load_trainable_text_tower

CLASSES = ["invasive carcinoma", "adipose tissue", "fibrous stroma", "necrosis", "lymphocytes"]


def test_fit_bridge_recovers_a_linear_map():
    generator = torch.Generator().manual_seed(0)
    source = torch.randn(400, 16, generator=generator)
    mapping = torch.randn(16, 24, generator=generator)
    fitted = fit_bridge(source, source @ mapping + 0.01 * torch.randn(400, 24, generator=generator))
    assert fitted.shape == (16, 24)
    assert torch.allclose(fitted, mapping, atol=0.01)


@pytest.fixture
def toy(
    tmp_path,
    monkeypatch,
    install_fake_conch,
    write_conch_checkpoint,
    conch_embed_dim,
    conch_v15_dim,
    write_feature_store,
):
    """Five classes whose CONCH v1 image embeddings sit at the tower's prompt embeddings;
    v1.5 features are ``X1 A + noise`` for a random ``A [512, 768]``."""
    install_fake_conch(monkeypatch)
    write_conch_checkpoint(tmp_path / "CONCH")
    with torch.no_grad():
        prompts = load_trainable_text_tower(str(tmp_path / "CONCH")).eval().encode(CLASSES).double()
    prompts = prompts - prompts.mean(0)  # the classes differ by these directions
    rng = np.random.default_rng(0)
    mapping = rng.normal(size=(conch_embed_dim, conch_v15_dim)) / conch_embed_dim**0.5
    spread = float(prompts.norm(dim=1).mean())

    def patches(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        labels = rng.integers(0, len(CLASSES), size=count)
        noise = rng.normal(size=(count, conch_embed_dim)) * 0.5 * spread / conch_embed_dim**0.5
        v1 = prompts.numpy()[labels] + noise
        v15 = (
            v1 @ mapping
            + 0.05 * spread * rng.normal(size=(count, conch_v15_dim)) / conch_v15_dim**0.5
        )
        return labels, v1, v15

    sources, targets, rows = [], [], []
    for index in range(3):
        _, v1, v15 = patches(300)
        sources.append(str(write_feature_store(tmp_path / f"v1_{index}.zarr", v1)))
        targets.append(str(write_feature_store(tmp_path / f"v15_{index}.zarr", v15)))
        rows.append(
            {
                "slide_id": f"s{index}",
                "organ": "breast",
                "report": f"Sections show {CLASSES[index]}.",
                "features": f"v15_{index}.zarr",
                "split": "train",
            }
        )
    (tmp_path / "manifest.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    labels, _, test_features = patches(500)
    return tmp_path, sources, targets, labels, torch.from_numpy(test_features).float()


def _zero_shot_accuracy(root, labels, features, **overrides) -> float:
    config = LimitTaskConfig(
        manifest=str(root / "manifest.jsonl"),
        text_model=str(root / "CONCH"),
        vision_encoder="conch-v1.5",
        num_negatives=1,
        val_fraction=0.0,
        report_filter="none",
        **overrides,
    )
    model = LimitTask(config).build_model()
    with torch.no_grad():
        text = torch.nn.functional.normalize(model.text_tower.eval().encode(CLASSES), dim=-1)
    predicted = (torch.nn.functional.normalize(features, dim=-1) @ text.T).argmax(1)
    return float((predicted.numpy() == labels).mean())


def test_least_squares_bridge_puts_the_untuned_tower_in_the_feature_space(toy):
    root, sources, targets, labels, features = toy
    bridged = _zero_shot_accuracy(
        root,
        labels,
        features,
        bridge_init="least_squares",
        bridge_source_features=sources,
        bridge_target_features=targets,
    )
    torch.manual_seed(0)
    random = _zero_shot_accuracy(root, labels, features)
    assert bridged > 0.8
    assert random < 0.45  # chance is 0.2


def test_bridge_store_errors_name_the_problem(toy, write_feature_store, conch_v15_dim):
    root, sources, targets, _, _ = toy
    with pytest.raises(ConfigError, match="same number"):
        bridge_from_stores(sources, targets[:2])
    # ones, not zeros: zarr leaves chunks of zeros unwritten, which reads as an incomplete store
    short = write_feature_store(root / "short.zarr", np.ones((7, conch_v15_dim)))
    with pytest.raises(DataError, match="has 300 patches but .*short.zarr has 7; extract both"):
        bridge_from_stores(sources[:1], [str(short)])
    with pytest.raises(DataError, match="768- and 768-wide features, unlike the first pair"):
        bridge_from_stores(sources[:1] + targets[:1], targets[:2])
    with pytest.raises(ConfigError, match="bridge map has shape \\(768, 768\\)"):
        _zero_shot_accuracy(
            root,
            np.zeros(1),
            torch.zeros(1, conch_v15_dim),
            bridge_init="least_squares",
            bridge_source_features=targets,
            bridge_target_features=targets,
        )


def test_conchz_recipe_takes_the_bridge_options():
    from pathlib import Path

    from medvl_engine.training.config import load_config

    recipe = Path(__file__).resolve().parents[3] / "train" / "limit_conchz.yaml"
    _, config = load_config(recipe, [], LimitTaskConfig)
    assert config.bridge_init == "random" and config.bridge_source_features is None
    overrides = [
        "task.bridge_init=least_squares",
        "task.bridge_source_features=[a_v1.zarr,b_v1.zarr]",
        "task.bridge_target_features=[a_v15.zarr,b_v15.zarr]",
    ]
    _, config = load_config(recipe, overrides, LimitTaskConfig)
    assert config.bridge_init == "least_squares"
    assert config.bridge_source_features == ["a_v1.zarr", "b_v1.zarr"]
    assert config.bridge_target_features == ["a_v15.zarr", "b_v15.zarr"]


def test_lora_tunes_the_conch_text_tower_and_saves_plain_weights(toy, tmp_path, conch_v15_dim):
    from medvl_engine.encoders.lora_targets import LORA_TARGETS
    from medvl_engine.training import RunConfig, train

    root = toy[0]
    config = LimitTaskConfig(
        manifest=str(root / "manifest.jsonl"),
        text_model=str(root / "CONCH"),
        vision_encoder="conch-v1.5",
        num_negatives=1,
        val_fraction=0.0,
        report_filter="none",
        eval_bootstrap=0,
        finetune="lora",
        lora_rank=4,
    )
    run = RunConfig(lr=1e-2, epochs=1, max_steps=2, out_dir=str(tmp_path / "run"), progress=False)
    task = LimitTask(config, run)
    model = task.build_model()
    tower = model.text_tower
    assert LORA_TARGETS["medvl-conch-text"] == ["linear1", "linear2"]  # out_proj would not run
    trainable = [name for name, p in tower.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name or name.startswith("projection") for name in trainable)
    assert sum("lora_B" in name for name in trainable) == 2 * 2  # two layers per block, 2 blocks
    before = tower.train().encode(CLASSES[:2]).detach()
    with torch.no_grad():
        for name, parameter in tower.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.05)
    assert not torch.allclose(tower.encode(CLASSES[:2]), before)  # the adapters run

    summary = train(LimitTask(config, run), run)
    assert summary["steps"] == 2 and np.isfinite(summary["losses"]).all()
    saved = load_trainable_text_tower(str(tmp_path / "run" / "final"))
    assert not any("lora_" in name for name, _ in saved.named_parameters())
    assert saved.eval().encode(CLASSES).shape == (len(CLASSES), conch_v15_dim)


def test_conch_lora_targets_skip_the_attention_output_layer():
    """CONCH's blocks: nn.MultiheadAttention ``attn`` and an MLP of ``c_fc`` and ``c_proj``."""
    from collections import OrderedDict

    from torch import nn

    from medvl_engine.encoders.conch_text import conch_lora_targets

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2)
            self.mlp = nn.Sequential(
                OrderedDict(c_fc=nn.Linear(8, 32), gelu=nn.GELU(), c_proj=nn.Linear(32, 8))
            )

    text = nn.Module()
    text.transformer = nn.Module()
    text.transformer.resblocks = nn.ModuleList([Block(), Block()])
    assert conch_lora_targets(text) == ["c_fc", "c_proj"]


def test_bridge_action_writes_the_map_with_its_stores_and_the_task_loads_it(
    toy, tmp_path, capsys, conch_embed_dim, conch_v15_dim
):
    from safetensors import safe_open

    from medvl_engine.cli.train import main as train_main

    root, sources, targets, labels, features = toy
    config = tmp_path / "bridge.yaml"
    config.write_text(
        f"run:\n  out_dir: {tmp_path / 'run'}\n"
        f"task:\n  manifest: {root / 'manifest.jsonl'}\n  text_model: {root / 'CONCH'}\n"
        f"  bridge_source_features: {json.dumps(sources)}\n"
        f"  bridge_target_features: {json.dumps(targets)}\n"
    )
    assert train_main(["limit", "bridge", "--config", str(config)]) == 0
    written = tmp_path / "run" / "bridge.safetensors"
    assert str(written) in capsys.readouterr().out
    with safe_open(str(written), framework="pt") as handle:
        stored = handle.get_tensor("bridge")
        metadata = handle.metadata()
    assert stored.shape == (conch_embed_dim, conch_v15_dim) and metadata["patches"] == "900"
    stores = json.loads(metadata["stores"])
    assert [s["source"] for s in stores] == sources and [s["target"] for s in stores] == targets
    assert all(len(s["source_sha256"]) == 64 for s in stores)
    torch.testing.assert_close(stored, bridge_from_stores(sources, targets))
    from_file = _zero_shot_accuracy(
        root, labels, features, bridge_init="file", bridge_file=str(written)
    )
    assert from_file > 0.8  # the same map as fitting at build time
    assert list(tmp_path.joinpath("run").iterdir()) == [written]  # no temporary left behind
    with pytest.raises(ConfigError, match="does not exist; write it first"):
        _zero_shot_accuracy(
            root, labels, features, bridge_init="file", bridge_file=str(tmp_path / "none")
        )
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="damaged or not a safetensors file"):
        _zero_shot_accuracy(
            root,
            labels,
            features,
            bridge_init="file",
            bridge_file=str(tmp_path / "junk.safetensors"),
        )
