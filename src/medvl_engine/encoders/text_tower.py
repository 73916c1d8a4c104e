"""A transformers text backbone + pooling + optional linear projection, saved as a model folder.

Folder layout (``config.json`` keys used here):
    text_config   the backbone's transformers config dict (with its own ``model_type``: bert,
                  clip_text_model, ...)
    pooling       "mean" (masked token mean), "cls" (first token) or "pooler" (the backbone's
                  pooler_output, the EOS token for CLIPTextModel)
    normalize_pooled  L2-normalise the pooled vector before the projection
    projection    {"in_features": E, "out_features": D, "bias": bool} or null
    max_length    tokenizer truncation length
model.safetensors holds ``text.<backbone keys>`` and ``projection.weight`` / ``projection.bias``;
tokenizer files sit at the folder's top level.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["TextTower", "text_tower_config", "load_text_tower"]

_POOLINGS = ("mean", "cls", "pooler")


class TextTower(torch.nn.Module):
    """Texts -> [T, D]: backbone token states [T, L, E] -> pooled [T, E] -> projection [T, D]."""

    def __init__(
        self,
        backbone: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        pooling: str = "mean",
        normalize_pooled: bool = False,
        projection: torch.nn.Linear | None = None,
        max_length: int = 128,
    ) -> None:
        super().__init__()
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {_POOLINGS}, got {pooling!r}")
        self.text: PreTrainedModel | PeftModel = backbone  # a PeftModel once LoRA wraps it
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.normalize_pooled = normalize_pooled
        self.projection = projection
        self.max_length = max_length

    @property
    def output_dim(self) -> int:
        if self.projection is not None:
            return int(self.projection.out_features)
        return int(self.text.config.hidden_size)

    def tokenize(
        self, texts: list[str], device: torch.device | None = None
    ) -> dict[str, torch.Tensor]:
        tokens = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {k: v.to(device) for k, v in tokens.items()} if device is not None else dict(tokens)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids [T, L] -> pooled backbone states [T, E] (before the projection)."""
        output = self.text(input_ids=input_ids, attention_mask=attention_mask)
        if self.pooling == "pooler":
            pooled = output.pooler_output
        elif self.pooling == "cls":
            pooled = output.last_hidden_state[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(output.last_hidden_state.dtype)
            pooled = (output.last_hidden_state * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        if self.normalize_pooled:
            pooled = F.normalize(pooled, dim=-1)
        result: torch.Tensor = pooled
        return result

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids [T, L] -> text embeddings [T, D] (not normalised)."""
        pooled = self.pooled(input_ids, attention_mask)
        return self.projection(pooled) if self.projection is not None else pooled

    def encode(self, texts: list[str]) -> torch.Tensor:
        device = next(self.parameters()).device
        tokens = self.tokenize(texts, device)
        result: torch.Tensor = self(tokens["input_ids"], tokens["attention_mask"])
        return result


def text_tower_config(tower: TextTower) -> dict[str, Any]:
    """The config.json entries that describe ``tower`` (merge them into a model folder's config)."""
    projection = None
    if tower.projection is not None:
        projection = {
            "in_features": int(tower.projection.in_features),
            "out_features": int(tower.projection.out_features),
            "bias": tower.projection.bias is not None,
        }
    return {
        "text_config": tower.text.config.to_dict(),
        "pooling": tower.pooling,
        "normalize_pooled": tower.normalize_pooled,
        "projection": projection,
        "max_length": tower.max_length,
    }


def load_text_tower(
    folder: Path, config: dict[str, Any], state: dict[str, torch.Tensor]
) -> TextTower:
    """Rebuild a :class:`TextTower` from a folder's config dict and its loaded state dict.

    The backbone is a class transformers itself defines for ``text_config["model_type"]``
    (or medvl's CONCH text transformer); nothing the folder ships is imported. Any problem is
    one ModelNotFoundError / UnsafeModelError sentence (see :mod:`._folder_checks`).
    """
    from medvl_engine.common.hf_classes import AutoConfig, AutoModel, AutoTokenizer
    from medvl_engine.encoders.folder_checks import (
        config_int,
        config_section,
        folder_errors,
        load_tokenizer,
        refuse_code,
        weights_mismatch,
    )
    from medvl_engine.errors import ModelNotFoundError

    folder = Path(folder)
    source = folder / "config.json"
    refuse_code(folder, config)
    text_config = dict(config_section(config, "text_config", source))
    backbone_type = text_config.pop("model_type", None)
    if not isinstance(backbone_type, str):
        raise ModelNotFoundError(
            f'{source} does not give the text model\'s "model_type" in its "text_config"; '
            "restore the model folder.",
            source,
        )
    if backbone_type == "medvl-conch-text":  # CONCH's transformer, known to transformers on demand
        from medvl_engine.encoders.conch_text import register_conch_text

        register_conch_text()
    pooling = config.get("pooling", "mean")
    if pooling not in _POOLINGS:
        raise ModelNotFoundError(
            f'{source} gives "pooling" as {pooling!r}; it must be one of {", ".join(_POOLINGS)}; '
            "restore the model folder.",
            source,
        )
    with folder_errors(folder, "text model settings"):
        backbone_config = AutoConfig.for_model(backbone_type, **text_config)
        backbone = AutoModel.from_config(backbone_config, trust_remote_code=False)
    projection = None
    if config.get("projection"):
        spec = config_section(config, "projection", source)
        projection = torch.nn.Linear(
            config_int(spec, "in_features", source),
            config_int(spec, "out_features", source),
            bias=bool(spec.get("bias", False)),
        )
    tokenizer = load_tokenizer(
        folder,
        lambda: AutoTokenizer.from_pretrained(
            folder, config=backbone_config, local_files_only=True, trust_remote_code=False
        ),
    )
    tower = TextTower(
        backbone,
        tokenizer,
        pooling=pooling,
        normalize_pooled=bool(config.get("normalize_pooled", False)),
        projection=projection,
        max_length=config_int(config, "max_length", source, default=128),
    )
    weights = folder / "model.safetensors"
    wanted = {k: v for k, v in state.items() if k.startswith(("text.", "projection."))}
    try:
        missing, unexpected = tower.load_state_dict(wanted, strict=False)
    except RuntimeError as error:  # tensors of the wrong shape for the sizes in config.json
        raise weights_mismatch(weights, [], []) from error
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise weights_mismatch(weights, missing, list(unexpected))
    return tower.eval()
