"""The trainable text tower of a LIMIT run: loaded from a name or a folder, and mapped to the
width of the frozen patch features by a projection (random, or the Conch-Z least-squares bridge).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from medvl_engine.errors import ConfigError
from medvl_engine.models.limit import load_limit_model

if TYPE_CHECKING:
    from medvl_engine.encoders import TextTower
    from medvl_engine.tasks.limit.config import LimitTaskConfig

__all__ = [
    "bridge_map",
    "load_trainable_text_tower",
    "make_conch_text_loadable",
    "projection_to",
]

# model_type of the folders whose text tower load_limit_model rebuilds
_TOWER_FOLDER_TYPES = ("medvl-text-tower", "medvl-demo")


def make_conch_text_loadable(folder: Path) -> None:
    """Register the CONCH text model with transformers when the folder's text tower is one
    (needs ``conch``, and says so at once when it is missing)."""
    from medvl_engine.encoders.conch import require_conch
    from medvl_engine.encoders.folder_checks import read_config

    config = read_config(folder)
    if (config.get("text_config") or {}).get("model_type") == "medvl-conch-text":
        from medvl_engine.encoders.conch_text import register_conch_text

        require_conch(f"The CONCH text tower in {folder}")
        register_conch_text()


def load_trainable_text_tower(spec: str, pooling: str = "mean", max_length: int = 128) -> TextTower:
    """A trainable :class:`medvl_engine.encoders.TextTower` from a name or a folder.

    spec: a registry name whose encoder has a text tower (``medvl-demo``, ``conch-v1``), a
    CONCH v1 checkpoint (``pytorch_model.bin`` or its folder), a "medvl-text-tower" /
    "medvl-demo" folder (e.g. a previous LIMIT run, CONCH-based ones included), or a
    transformers text model folder (BERT-like or CLIP; ``pooling`` applies to those).
    CONCH towers need the ``conch`` package and say so at once when it is missing.
    """
    from medvl_engine.encoders import TextTower, available_encoders, load_encoder
    from medvl_engine.encoders.conch import require_conch
    from medvl_engine.encoders.resolve import model_kind_on_disk

    folder = Path(spec).expanduser()
    registry = {entry.name: entry for entry in available_encoders()}
    if spec in registry:
        if registry[spec].model_type == "conch-v1":
            require_conch(f"task.text_model={spec}")
        tower: TextTower | None = getattr(load_encoder(spec), "text_tower", None)
        if tower is None:
            raise ConfigError(
                f"encoder {spec!r} has no trainable text tower in medvl; give a text model folder."
            )
        return tower.train()
    model_type = model_kind_on_disk(folder) if folder.exists() else None
    if model_type == "conch-v1" and not (folder / "config.json").is_file():
        require_conch(f"task.text_model={spec} (a CONCH checkpoint)")
        conch_tower: TextTower | None = getattr(
            load_encoder(folder, model_type="conch-v1"), "text_tower", None
        )
        if conch_tower is None:
            raise ConfigError(
                f"encoder {spec!r} has no trainable text tower in medvl; give a text model folder."
            )
        return conch_tower.train()
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"text model {spec!r} is neither a registered encoder nor a folder with config.json; "
            "set task.text_model to medvl-demo, conch-v1 or a model folder."
        )
    make_conch_text_loadable(folder)
    if model_type in _TOWER_FOLDER_TYPES:
        return load_limit_model(folder).text_tower.train()
    from medvl_engine.common.hf_classes import AutoModel, AutoTokenizer, CLIPTextModel
    from medvl_engine.encoders.folder_checks import (
        WEIGHTS_NAME,
        check_model_folder,
        check_safetensors,
        folder_errors,
    )
    from medvl_engine.encoders.folder_checks import load_tokenizer as checked_tokenizer

    check_model_folder(folder, needs_tokenizer=True)  # no code, no pickles, a vocabulary
    check_safetensors(folder / WEIGHTS_NAME)
    tokenizer = checked_tokenizer(
        folder,
        lambda: AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        ),
    )
    with folder_errors(folder, "text model settings and weights"):
        if model_type == "clip":
            backbone = CLIPTextModel.from_pretrained(
                folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
            )
            pooling = "pooler"
        else:
            backbone = AutoModel.from_pretrained(
                folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
            )
    return TextTower(backbone, tokenizer, pooling=pooling, max_length=max_length).train()


def projection_to(tower: TextTower, width: int, bridge: torch.Tensor | None = None) -> nn.Linear:
    """A linear map from the tower's pooled output to ``width`` (the vision dim).

    Without a projection: a new ``Linear(E, width)``. With one to a different width
    (e.g. CONCH v1 text 512 -> CONCH v1.5 patch features 768): a new ``Linear(512, width)``
    composed with it into one layer, ``W = W_new W_old``, ``b = W_new b_old``, so the
    initial tower equals "old projection, then new linear map". ``bridge`` ``[512, width]``
    (from :mod:`medvl_engine.tasks.limit.bridge`) sets ``W_new = bridge^T`` instead of a
    random init.
    """
    old = tower.projection
    source_dim = int(tower.text.config.hidden_size) if old is None else old.out_features
    extra = nn.Linear(source_dim, width, bias=False)
    if bridge is not None:
        if tuple(bridge.shape) != (source_dim, width):
            raise ConfigError(
                f"the bridge map has shape {tuple(bridge.shape)} but the text tower needs "
                f"({source_dim}, {width}); give stores of the tower's own embeddings "
                "(task.bridge_source_features) and of the training features "
                "(task.bridge_target_features)."
            )
        with torch.no_grad():
            extra.weight.copy_(bridge.T)
    if old is None:
        return extra
    merged = nn.Linear(old.in_features, width, bias=old.bias is not None)
    with torch.no_grad():
        merged.weight.copy_(extra.weight @ old.weight)
        if old.bias is not None:
            merged.bias.copy_(extra.weight @ old.bias)
    return merged


def bridge_map(config: LimitTaskConfig) -> torch.Tensor | None:
    """The least-squares bridge ``task.bridge_init`` asks for, or None for a random map."""
    if config.bridge_init == "random":
        return None
    if config.bridge_init == "file":
        from medvl_engine.tasks.limit.bridge import read_bridge_file

        if not config.bridge_file:
            raise ConfigError(
                "task.bridge_init=file needs task.bridge_file, the map written by "
                "`medvl-train limit bridge`."
            )
        bridge, metadata = read_bridge_file(config.bridge_file)
        print(
            f"limit: bridge map from {config.bridge_file} ({metadata.get('patches', '?')} patches)",
            flush=True,
        )
        return bridge
    from medvl_engine.tasks.limit.bridge import bridge_from_stores

    return bridge_from_stores(
        config.bridge_source_features or [],
        config.bridge_target_features or [],
        config.bridge_ridge,
    )
