"""CONCH v1 and v1.5 loaders run end to end on a stand-in `conch` package and TITAN model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from _conch_helpers import (
    EMBED_DIM,
    V15_DIM,
    install_fake_conch,
    install_fake_titan,
    write_conch_checkpoint,
)
from medvl_engine.encoders import TextTowerUnavailableError, load_encoder

PROMPTS = ["invasive carcinoma", "adipose tissue", "fibrous stroma with lymphocytes"]


def _patches(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(count, 64, 64, 3), dtype=np.uint8)


def test_conch_v1_loads_from_a_checkpoint_folder_and_embeds_both_sides(tmp_path, monkeypatch):
    install_fake_conch(monkeypatch)
    folder = write_conch_checkpoint(tmp_path / "CONCH")
    encoder = load_encoder(folder, model_type="conch-v1")
    assert (encoder.embed_dim, encoder.patch_size, encoder.target_mpp) == (512, 448, 0.5)

    images = encoder.encode_patches(_patches(3))
    texts = encoder.encode_text(PROMPTS)
    assert images.shape == (3, EMBED_DIM) and texts.shape == (3, EMBED_DIM)
    assert torch.allclose(images.norm(dim=1), torch.ones(3), atol=1e-5)
    assert torch.allclose(texts.norm(dim=1), torch.ones(3), atol=1e-5)
    assert not torch.allclose(texts[0], texts[1], atol=1e-3)  # different prompts, different rows

    from _conch_helpers import tokenize

    expected = encoder.model.encode_text(tokenize(encoder.tokenizer, PROMPTS), normalize=True)
    assert torch.allclose(texts, expected, atol=1e-5)
    same_file = load_encoder(folder / "pytorch_model.bin", model_type="conch-v1")
    assert torch.allclose(same_file.encode_text(PROMPTS), texts, atol=1e-6)


def test_conch_v1_text_tower_reproduces_conch_encode_text(tmp_path, monkeypatch):
    install_fake_conch(monkeypatch)
    encoder = load_encoder(write_conch_checkpoint(tmp_path / "CONCH"), model_type="conch-v1")
    tower = encoder.text_tower
    assert tower.output_dim == EMBED_DIM and tower.pooling == "pooler"
    assert tower.projection.in_features == 32  # CONCH's text_projection, width -> 512
    with torch.no_grad():
        tuned_side = tower.encode(PROMPTS)
        raw = encoder.model.encode_text(encoder.tokenize(PROMPTS), normalize=False)
    assert torch.allclose(tuned_side, raw, atol=1e-5)
    tower.text.text.cls_emb.data.add_(1.0)  # the tower is a copy: the encoder is untouched
    with torch.no_grad():
        again = encoder.model.encode_text(encoder.tokenize(PROMPTS), normalize=False)
    assert torch.allclose(again, raw)


def test_conch_v1_checkpoint_missing_is_one_clear_error(tmp_path, monkeypatch):
    from medvl_engine.errors import ModelNotFoundError

    install_fake_conch(monkeypatch)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="MahmoodLab/CONCH"):
        load_encoder(tmp_path / "empty", model_type="conch-v1")


def test_conch_v15_from_titan_embeds_patches_and_refuses_prompts(tmp_path, monkeypatch):
    folder = install_fake_titan(monkeypatch, tmp_path / "TITAN")
    encoder = load_encoder(folder)
    assert encoder.embed_dim == V15_DIM and encoder.patch_size == 448
    features = encoder.encode_patches(_patches(2))
    assert features.shape == (2, V15_DIM)
    assert torch.allclose(features.norm(dim=1), torch.ones(2), atol=1e-5)
    assert not torch.allclose(features[0], features[1], atol=1e-4)
    with pytest.raises(TextTowerUnavailableError, match="text encoder is not public"):
        encoder.encode_text(["tumor"])


def test_conch_v15_snapshot_without_return_conch_says_what_to_download(tmp_path, monkeypatch):
    import transformers

    from medvl_engine.errors import ModelNotFoundError

    folder = install_fake_titan(monkeypatch, tmp_path / "TITAN")
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", lambda *a, **k: object())
    with pytest.raises(ModelNotFoundError, match="huggingface-cli download MahmoodLab/TITAN"):
        load_encoder(folder)
