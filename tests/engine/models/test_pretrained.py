"""Recipes that name pretrained weights load them, or stop with one sentence; no silent swap."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import ConvNextConfig, ConvNextModel

from medvl_engine.cli.train import main as train_main
from medvl_engine.errors import ConfigError, ModelNotFoundError, UnsafeModelError
from medvl_engine.models.convnext import build_convnext

DEPTHS, WIDTHS = [1, 1, 1, 1], [8, 16, 32, 64]
ABSENT_ID = "medvl-tests/no-such-convnext"


def _saved_convnext(folder, depths=DEPTHS, widths=WIDTHS) -> ConvNextModel:
    torch.manual_seed(0)
    model = ConvNextModel(ConvNextConfig(depths=depths, hidden_sizes=widths, num_channels=3))
    model.save_pretrained(folder)
    return model


def test_named_convnext_weights_on_disk_are_loaded(tmp_path):
    saved = _saved_convnext(tmp_path / "convnext")
    loaded = build_convnext(DEPTHS, WIDTHS, str(tmp_path / "convnext"))
    stem = "embeddings.patch_embeddings.weight"
    assert torch.equal(loaded.state_dict()[stem], saved.state_dict()[stem])


@pytest.mark.parametrize("source", [ABSENT_ID, "missing-folder/convnext"])
def test_missing_convnext_weights_stop_with_how_to_get_them(tmp_path, monkeypatch, source):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError) as caught:
        build_convnext(DEPTHS, WIDTHS, source)
    message = str(caught.value)
    assert f"ConvNeXt weights '{source}'" in message
    assert f"huggingface-cli download {source}" in message
    assert "task.vision_pretrained=null" in message  # how to opt into random init


def test_convnext_weights_of_another_shape_are_refused(tmp_path):
    _saved_convnext(tmp_path / "convnext", depths=[1, 1, 2, 1])
    with pytest.raises(ConfigError, match=r"depths \[1, 1, 2, 1\].*not the configured"):
        build_convnext(DEPTHS, WIDTHS, str(tmp_path / "convnext"))


def test_a_pretrained_folder_shipping_code_is_refused(tmp_path):
    _saved_convnext(tmp_path / "convnext")
    (tmp_path / "convnext" / "modeling_convnext.py").write_text("raise SystemExit('ran')\n")
    with pytest.raises(UnsafeModelError, match="program code"):
        build_convnext(DEPTHS, WIDTHS, str(tmp_path / "convnext"))


def test_missing_text_weights_and_tokenizer_stop_instead_of_byte_level_fallback(
    tmp_path, monkeypatch, tiny_topk_model
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="task.text_pretrained=null"):
        tiny_topk_model(tmp_path, text_pretrained="medvl-tests/no-such-clip")
    # with no weights named, random init and the byte-level tokenizer are the explicit choice
    model = tiny_topk_model(tmp_path)
    assert len(model.tokenizer) == 514


def test_paper_recipe_without_its_weights_exits_2_with_one_sentence(tmp_path, capsys):
    from medvl_engine.synthetic import make_mammogram_cohort

    make_mammogram_cohort(tmp_path / "cohort", 4, seed=3, size=(192, 128))
    config = str(Path(__file__).parents[3] / "train")
    argv = [
        "topksiglip",
        "--config",
        f"{config}/topksiglip_embed.yaml",
        f"task.manifest={tmp_path / 'cohort' / 'manifest.csv'}",
        f"task.vision_pretrained={ABSENT_ID}",
        f"run.out_dir={tmp_path / 'run'}",
    ]
    assert train_main(argv) == 2
    stderr = capsys.readouterr().err.strip()
    assert stderr.count("\n") == 0
    assert f"ConvNeXt weights '{ABSENT_ID}'" in stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
