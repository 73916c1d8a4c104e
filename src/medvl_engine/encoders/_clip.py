"""Adapter for transformers CLIP checkpoints (OpenAI CLIP, PLIP, QuiltNet in HF format)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from medvl_engine.encoders._preprocess import ImagePreprocess
from medvl_engine.encoders.base import PatchTextEncoder
from medvl_engine.encoders.folder_checks import (
    WEIGHTS_NAME,
    check_model_folder,
    check_safetensors,
    folder_errors,
    load_tokenizer,
    read_json_object,
)
from medvl_engine.encoders.text_tower import TextTower

if TYPE_CHECKING:
    from transformers import CLIPModel, CLIPTextConfig, PreTrainedTokenizerBase

__all__ = ["ClipEncoder", "load_clip_folder"]


class ClipEncoder(PatchTextEncoder):
    """transformers ``CLIPModel``: visual_projection(pooled ViT) and text_projection(EOS token)."""

    def __init__(
        self,
        model: CLIPModel,
        tokenizer: PreTrainedTokenizerBase,
        preprocess: ImagePreprocess,
        *,
        name: str,
        target_mpp: float = 0.5,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]  # transformers' wrapped .to() is annotated as unbound
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.name = name
        self.embed_dim = _projection_dim(model)
        self.patch_size = int(preprocess.crop_size[0])
        self.target_mpp = float(target_mpp)
        self.max_text_length = int(_text_config(model).max_position_embeddings)
        self.text_tower = _clip_text_tower(self.model, tokenizer, self.max_text_length)

    def _embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        pixels = self.preprocess(patches)
        pooled = self.model.vision_model(pixel_values=pixels).pooler_output
        result: torch.Tensor = self.model.visual_projection(pooled)
        return result

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        return self.text_tower.encode(texts)


def _clip_text_tower(
    model: CLIPModel, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> TextTower:
    """The CLIP text side as a :class:`TextTower` sharing the model's modules (no copy).

    pooled = EOS-token state of the text transformer, then ``text_projection``; a LIMIT run
    can tune it and save it as a "medvl-text-tower" folder paired with this CLIP's vision side.
    """
    from medvl_engine.common.hf_classes import CLIPTextModel

    config = _text_config(model)
    if isinstance(model.text_model, CLIPTextModel):  # transformers >= 5
        backbone = model.text_model
    else:  # older releases hold the bare transformer; wrap it without copying weights
        backbone = CLIPTextModel(config)
        backbone.text_model = model.text_model
    projection = torch.nn.Linear(config.hidden_size, _projection_dim(model), bias=False)
    projection.weight = model.text_projection.weight
    return TextTower(
        backbone, tokenizer, pooling="pooler", projection=projection, max_length=max_length
    )


def _text_config(model: CLIPModel) -> CLIPTextConfig:
    """The text half of a loaded CLIP config (transformers has built it from the dict)."""
    from medvl_engine.common.hf_classes import CLIPTextConfig

    config = model.config.text_config
    if not isinstance(config, CLIPTextConfig):
        raise TypeError(f"a loaded CLIP model holds a text config of type {type(config).__name__}")
    return config


def _image_size(model: CLIPModel) -> int:
    """Side in pixels of the images the vision half of a loaded CLIP model takes."""
    from medvl_engine.common.hf_classes import CLIPVisionConfig

    config = model.config.vision_config
    if not isinstance(config, CLIPVisionConfig):
        raise TypeError(
            f"a loaded CLIP model holds a vision config of type {type(config).__name__}"
        )
    size = config.image_size
    if not isinstance(size, int):
        raise TypeError(f"CLIP's vision config gives image_size {size!r}, not one side in pixels")
    return size


def _projection_dim(model: CLIPModel) -> int:
    """D, the size of the joint embedding space of a loaded CLIP model."""
    return int(model.config.projection_dim or 0)


def load_clip_folder(
    folder: Path, *, name: str, device: str | torch.device = "cpu", target_mpp: float = 0.5
) -> ClipEncoder:
    """Load a transformers CLIP folder (config.json, model.safetensors, tokenizer, preprocessor).

    The architecture is transformers' ``CLIPModel``; the folder may hold no code and no pickled
    weights (see :mod:`._folder_checks`).
    """
    from medvl_engine.common.hf_classes import AutoTokenizer, CLIPModel

    check_model_folder(folder, needs_tokenizer=True)
    check_safetensors(folder / WEIGHTS_NAME)
    with folder_errors(folder, "CLIP settings and weights"):
        model = CLIPModel.from_pretrained(
            folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
        )
    tokenizer = load_tokenizer(
        folder,
        lambda: AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        ),
    )
    preprocess_file = folder / "preprocessor_config.json"
    if preprocess_file.is_file():
        settings = read_json_object(preprocess_file, "image preprocessing settings")
        with folder_errors(folder, "image preprocessing settings"):
            preprocess = ImagePreprocess.from_config(settings)
    else:
        size = _image_size(model)
        preprocess = ImagePreprocess(shortest_edge=size, crop_size=(size, size))
    with folder_errors(folder, "CLIP settings and weights"):
        return ClipEncoder(
            model, tokenizer, preprocess, name=name, target_mpp=target_mpp, device=device
        )
