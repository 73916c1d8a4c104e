"""Project model folders pairing a text tower with a frozen vision encoder (LIMIT-tuned towers).

config.json: {"model_type": "medvl-text-tower", "vision_encoder": NAME_OR_PATH, ...text tower keys}
(see :mod:`._text_tower`); ``vision_encoder`` is a registry name, a Hugging Face id, or a
folder path (relative paths are taken relative to the model folder).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from medvl_engine.common.atomic import atomic_directory
from medvl_engine.encoders.base import PatchTextEncoder
from medvl_engine.encoders.text_tower import TextTower, load_text_tower, text_tower_config
from medvl_engine.errors import ConfigError

__all__ = ["PAIRED_MODEL_TYPE", "PairedEncoder", "load_paired_folder", "save_text_tower_folder"]

PAIRED_MODEL_TYPE = "medvl-text-tower"


class PairedEncoder(PatchTextEncoder):
    """Patches through a frozen vision encoder [B, D], texts through a separate tower [T, D]."""

    def __init__(self, vision: PatchTextEncoder, text_tower: TextTower, *, name: str) -> None:
        if text_tower.output_dim != vision.embed_dim:
            raise ConfigError(
                f"Model {name} has a text tower of width {text_tower.output_dim} but its vision "
                f"encoder {vision.name} embeds to {vision.embed_dim}; give the tower a projection "
                f"to {vision.embed_dim} dimensions."
            )
        self.vision = vision
        self.device = vision.device
        self.text_tower = text_tower.to(self.device).eval()
        self.name = name
        self.embed_dim = vision.embed_dim
        self.patch_size = vision.patch_size
        self.target_mpp = vision.target_mpp

    def _embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        return self.vision._embed_patches(patches)

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        return self.text_tower.encode(texts)


def save_text_tower_folder(folder: str | Path, tower: TextTower, vision_encoder: str) -> Path:
    """Save ``tower`` as a "medvl-text-tower" folder paired with ``vision_encoder``, atomically."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "model_type": PAIRED_MODEL_TYPE,
        "vision_encoder": str(vision_encoder),
        **text_tower_config(tower),
    }
    state = {f"text.{k}": v.detach().cpu().contiguous() for k, v in tower.text.state_dict().items()}
    if tower.projection is not None:
        for key, value in tower.projection.state_dict().items():
            state[f"projection.{key}"] = value.detach().cpu().contiguous()

    def fill(staging: Path) -> None:
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        save_file(state, staging / "model.safetensors")
        tower.tokenizer.save_pretrained(staging)

    return atomic_directory(folder, fill, what="text tower folder")


def load_paired_folder(
    folder: Path,
    config: dict[str, Any],
    *,
    name: str,
    device: str | torch.device,
    load_vision: Callable[[str, str | torch.device], PatchTextEncoder],
) -> PairedEncoder:
    """Load a "medvl-text-tower" folder and the vision encoder its config names."""
    from medvl_engine.encoders.folder_checks import check_model_folder, load_weights

    config = check_model_folder(folder, needs_tokenizer=True)
    vision_name = config.get("vision_encoder")
    if not vision_name or not isinstance(vision_name, str):
        raise ConfigError(
            f'Model folder {folder} does not name its vision encoder; add "vision_encoder" '
            "(a registry name, Hugging Face id or folder) to its config.json.",
            folder,
        )
    tower = load_text_tower(folder, config, load_weights(folder))
    relative = folder / vision_name
    vision = load_vision(str(relative) if relative.is_dir() else vision_name, device)
    return PairedEncoder(vision, tower, name=name)
