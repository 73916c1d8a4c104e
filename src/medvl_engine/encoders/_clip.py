"""Adapter for transformers CLIP checkpoints (OpenAI CLIP, PLIP, QuiltNet in HF format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from medvl_engine.encoders._base import PatchTextEncoder
from medvl_engine.encoders._preprocess import ImagePreprocess
from medvl_engine.encoders._text_tower import TextTower
from medvl_engine.errors import ModelNotFoundError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["ClipEncoder", "load_clip_folder"]


class ClipEncoder(PatchTextEncoder):
    """transformers ``CLIPModel``: visual_projection(pooled ViT) and text_projection(EOS token)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        preprocess: ImagePreprocess,
        *,
        name: str,
        target_mpp: float = 0.5,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.name = name
        self.embed_dim = int(model.config.projection_dim)
        self.patch_size = int(preprocess.crop_size[0])
        self.target_mpp = float(target_mpp)
        self.max_text_length = int(model.config.text_config.max_position_embeddings)
        self.text_tower = _clip_text_tower(self.model, tokenizer, self.max_text_length)

    def _embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        pixels = self.preprocess(patches)
        pooled = self.model.vision_model(pixel_values=pixels).pooler_output
        return self.model.visual_projection(pooled)

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        return self.text_tower.encode(texts)


def _clip_text_tower(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> TextTower:
    """The CLIP text side as a :class:`TextTower` sharing the model's modules (no copy).

    pooled = EOS-token state of the text transformer, then ``text_projection``; a LIMIT run
    can tune it and save it as a "medvl-text-tower" folder paired with this CLIP's vision side.
    """
    from transformers import CLIPTextModel

    config = model.config.text_config
    if isinstance(model.text_model, CLIPTextModel):  # transformers >= 5
        backbone = model.text_model
    else:  # older releases hold the bare transformer; wrap it without copying weights
        backbone = CLIPTextModel(config)
        backbone.text_model = model.text_model
    projection = torch.nn.Linear(config.hidden_size, model.config.projection_dim, bias=False)
    projection.weight = model.text_projection.weight
    return TextTower(
        backbone, tokenizer, pooling="pooler", projection=projection, max_length=max_length
    )


def load_clip_folder(
    folder: Path, *, name: str, device: str | torch.device = "cpu", target_mpp: float = 0.5
) -> ClipEncoder:
    """Load a transformers CLIP folder (config.json, weights, tokenizer, preprocessor config)."""
    from transformers import AutoTokenizer, CLIPModel

    try:
        model = CLIPModel.from_pretrained(folder, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except OSError as error:
        raise ModelNotFoundError(
            f"Model folder {folder} is not a complete transformers CLIP checkpoint ({error}); "
            "it needs config.json, model.safetensors (or pytorch_model.bin) and tokenizer files.",
            folder,
        ) from error
    preprocess_file = folder / "preprocessor_config.json"
    if preprocess_file.is_file():
        preprocess = ImagePreprocess.from_config(json.loads(preprocess_file.read_text()))
    else:
        size = int(model.config.vision_config.image_size)
        preprocess = ImagePreprocess(shortest_edge=size, crop_size=(size, size))
    return ClipEncoder(
        model, tokenizer, preprocess, name=name, target_mpp=target_mpp, device=device
    )
