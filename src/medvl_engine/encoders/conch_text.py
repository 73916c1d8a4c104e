"""CONCH v1's text transformer as a transformers model, so a text-tower folder can hold it.

CONCH's text encoder (a CoCa ``TextTransformer`` from the optional ``conch`` package) is
wrapped as a transformers model, ``model_type`` "medvl-conch-text", so the generic
text-tower folder code saves and rebuilds it:

    ids [T, L] -> padded with <pad> to context_length - 1 (CONCH's tokenisation, 127 ids)
               -> TextTransformer (a <cls> token is appended, its final state is pooled)
               -> pooled [T, width]                           (pooler_output, 768 for v1)
    TextTower.projection = CONCH's text_projection as Linear(width, embed_dim, bias=False)
               -> [T, embed_dim]                              (512 for v1)

so ``tower.encode(texts)`` equals CONCH's ``encode_text(tokenize(texts), normalize=False)``,
and LIMIT's projection to CONCH v1.5 features (768) composes into this projection
(:func:`medvl_engine.encoders.conch.conch_text_tower` builds that tower).
The folder's ``text_config`` holds the architecture (context_length, vocab_size, width,
heads, layers, embed_dim, pad ids); model.safetensors holds the weights; rebuilding needs
the ``conch`` package but no network. Call :func:`register_conch_text` before
``AutoConfig.for_model("medvl-conch-text")`` / ``AutoModel.from_config`` see it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from medvl_engine.common.hf_classes import (
    AutoConfig,
    AutoModel,
    BaseModelOutputWithPooling,
    PreTrainedConfig,
    PreTrainedModel,
)
from medvl_engine.errors import MissingDependencyError

__all__ = [
    "CONCH_TEXT_MODEL_TYPE",
    "ConchTextConfig",
    "ConchTextModel",
    "conch_lora_targets",
    "register_conch_text",
]

CONCH_TEXT_MODEL_TYPE = "medvl-conch-text"
CONCH_INSTALL = "pip install git+https://github.com/mahmoodlab/CONCH"


class ConchTextConfig(PreTrainedConfig):
    """Architecture of a CONCH text tower (defaults: CONCH v1, ``conch_ViT-B-16``)."""

    model_type = CONCH_TEXT_MODEL_TYPE

    def __init__(
        self,
        context_length: int = 128,
        vocab_size: int = 32007,
        width: int = 768,
        heads: int = 12,
        layers: int = 12,
        embed_dim: int = 512,
        model_pad_id: int = 0,
        pad_token_id: int = 0,
        **kwargs: Any,
    ) -> None:
        self.context_length = context_length
        self.vocab_size = vocab_size
        self.width = width
        self.heads = heads
        self.layers = layers
        self.embed_dim = embed_dim
        self.model_pad_id = model_pad_id
        self.hidden_size = width  # TextTower.output_dim without a projection
        super().__init__(pad_token_id=pad_token_id, **kwargs)  # type: ignore[call-arg]  # a config kwarg transformers' annotation leaves out


def _text_transformer_class() -> type[nn.Module]:
    try:
        from conch.open_clip_custom.transformer import TextTransformer
    except ImportError as error:
        raise MissingDependencyError(
            "The CONCH text tower needs the optional CONCH package, which is not installed; "
            f"run `{CONCH_INSTALL}`."
        ) from error
    transformer_class: type[nn.Module] = TextTransformer
    return transformer_class


class ConchTextModel(PreTrainedModel):
    """CONCH's TextTransformer without its output projection: ids [T, L] -> pooled [T, width]."""

    config_class = ConchTextConfig
    base_model_prefix = "conch_text"
    _supports_param_buffer_assignment = False

    def __init__(self, config: ConchTextConfig) -> None:
        super().__init__(config)
        text_transformer = _text_transformer_class()
        self.text = text_transformer(
            context_length=config.context_length,
            vocab_size=config.vocab_size,
            width=config.width,
            heads=config.heads,
            layers=config.layers,
            output_dim=config.embed_dim,
            act_layer=nn.GELU,
            norm_layer=nn.LayerNorm,
            embed_cls=True,
            pad_id=config.model_pad_id,
            output_tokens=True,
        )
        # the projection lives in TextTower.projection (same as assigning None to the parameter)
        self.text.register_parameter("text_projection", None)
        self.post_init()  # type: ignore[no-untyped-call]  # unannotated in transformers
        from medvl_engine.encoders.lora_targets import LORA_TARGETS

        LORA_TARGETS[CONCH_TEXT_MODEL_TYPE] = conch_lora_targets(self.text)

    def _init_weights(self, module: nn.Module) -> None:
        """Weights come from CONCH's checkpoint; keep the TextTransformer's own init."""

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **unused: Any,
    ) -> BaseModelOutputWithPooling:
        """ids [T, L] -> last_hidden_state [T, C - 1, width], pooler_output (<cls>) [T, width].

        ``attention_mask`` is not needed: CONCH masks padding by the <pad> id. Ids are padded
        (or cut) to ``context_length - 1`` positions, as CONCH's own ``tokenize`` does.
        """
        length = self.config.context_length - 1
        ids = input_ids[:, :length]
        if ids.shape[1] < length:
            padding = ids.new_full((ids.shape[0], length - ids.shape[1]), self.config.pad_token_id)
            ids = torch.cat([ids, padding], dim=1)
        pooled, tokens = self.text(ids)
        return BaseModelOutputWithPooling(last_hidden_state=tokens, pooler_output=pooled)


def conch_lora_targets(text: nn.Module) -> list[str]:
    """Names of the layers that ``task.finetune=lora`` adapts in a CONCH text transformer.

    The ``nn.Linear`` layers of the residual blocks (CONCH: each block's MLP, ``c_fc`` and
    ``c_proj``), except those inside ``nn.MultiheadAttention``: its forward reads
    ``out_proj.weight`` directly, so an adapter there would never run.
    """
    transformer = text.get_submodule("transformer")
    inside_attention = {
        id(module)
        for attention in transformer.modules()
        if isinstance(attention, nn.MultiheadAttention)
        for module in attention.modules()
    }
    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in transformer.named_modules()
            if isinstance(module, nn.Linear) and id(module) not in inside_attention
        }
    )


def register_conch_text() -> None:
    """Make "medvl-conch-text" known to transformers' AutoConfig / AutoModel (idempotent)."""
    AutoConfig.register(CONCH_TEXT_MODEL_TYPE, ConchTextConfig, exist_ok=True)
    AutoModel.register(ConchTextConfig, ConchTextModel, exist_ok=True)
