"""The one model resolver: names and paths of every model kind -> folder + kind."""

from __future__ import annotations

import json

import pytest

from medvl_engine.demo_models import SHIPPED_ROOT
from medvl_engine.encoders.resolve import (
    TOPKSIGLIP_MODEL_TYPE,
    model_kind_on_disk,
    named_topksiglip_models,
    read_model_type,
    resolve_encoder,
    resolve_topksiglip,
)
from medvl_engine.errors import ModelNotFoundError


def test_registry_name_of_the_shipped_encoder_resolves_without_network():
    resolved = resolve_encoder("medvl-demo")
    assert (resolved.kind, resolved.shipped) == ("medvl-demo", True)
    assert resolved.path == SHIPPED_ROOT / "medvl-demo"


def test_folder_kind_is_its_config_model_type_and_a_caller_type_wins(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "clip"}))
    assert resolve_encoder(tmp_path).kind == "clip"
    assert resolve_encoder(tmp_path, model_type="conch-v1").kind == "conch-v1"
    assert read_model_type(tmp_path) == "clip"


def test_unknown_name_is_one_sentence_naming_the_registry():
    with pytest.raises(ModelNotFoundError, match="is not a registered name .*medvl-demo"):
        resolve_encoder("no-such-model")


def test_checkpoint_file_has_no_kind_until_the_caller_gives_one(tmp_path):
    checkpoint = tmp_path / "pytorch_model.bin"
    checkpoint.write_bytes(b"\0")
    assert resolve_encoder(checkpoint).kind is None
    assert resolve_encoder(checkpoint, model_type="conch-v1").kind == "conch-v1"


def test_kind_on_disk_of_conch_checkpoints_and_folders(tmp_path):
    conch = tmp_path / "CONCH"
    conch.mkdir()
    (conch / "pytorch_model.bin").write_bytes(b"\0")
    assert model_kind_on_disk(conch) == "conch-v1"
    assert model_kind_on_disk(conch / "pytorch_model.bin") == "conch-v1"
    (conch / "config.json").write_text(json.dumps({"model_type": "medvl-text-tower"}))
    assert model_kind_on_disk(conch) == "medvl-text-tower"  # config.json says what it is
    assert model_kind_on_disk(tmp_path / "missing") is None


def test_topksiglip_names_and_folders_carry_their_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    shipped = resolve_topksiglip("topksiglip-demo")
    assert shipped.path == named_topksiglip_models()["topksiglip-demo"]
    assert shipped.kind == TOPKSIGLIP_MODEL_TYPE and shipped.shipped
    installed = tmp_path / "cache" / "models" / "mine"
    installed.mkdir(parents=True)
    (installed / "config.json").write_text(json.dumps({"model_type": TOPKSIGLIP_MODEL_TYPE}))
    assert resolve_topksiglip("mine").path == installed
    with pytest.raises(ModelNotFoundError, match="TopKSigLIP model other was not found"):
        resolve_topksiglip("other")
