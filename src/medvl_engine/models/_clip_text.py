"""CLIP text tower of TopKSigLIP: transformers ``CLIPTextModel`` with a longer context.

The pretrained CLIP text encoder (``openai/clip-vit-base-patch32``) has 77 positions; parsed
mammography reports need more, so :func:`extend_position_embeddings` grows the table to 170
positions, initialising the new rows by linear interpolation of the old ones. Offline, a small
randomly initialised CLIP text model with a byte-level BPE tokenizer (no merges: one token per
byte) is built from a config alone (:func:`write_byte_level_tokenizer`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from medvl_engine.common.hf_classes import CLIPTextConfig, CLIPTextModel, CLIPTokenizer
from medvl_engine.models._pretrained import load_pretrained

__all__ = [
    "build_text_model",
    "byte_symbols",
    "extend_position_embeddings",
    "load_tokenizer",
    "write_byte_level_tokenizer",
]

BOS_TOKEN = "<|startoftext|>"
EOS_TOKEN = "<|endoftext|>"


def byte_symbols() -> list[str]:
    """The 256 printable symbols byte-level BPE uses for the bytes 0..255, in byte order.

    Printable Latin-1 bytes stand for themselves; the others are shifted past U+0100.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    ]
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + shifted)
            shifted += 1
    return [symbols[b] for b in range(256)]


def write_byte_level_tokenizer(folder: str | Path) -> CLIPTokenizer:
    """Write ``vocab.json`` + ``merges.txt`` of a merge-free byte-level CLIP tokenizer and load it.

    Vocabulary (514 ids): the 256 byte symbols, the same with the end-of-word mark ``</w>``,
    then ``<|startoftext|>`` (512) and ``<|endoftext|>`` (513, also the padding token).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    symbols = byte_symbols()
    vocab = {symbol: i for i, symbol in enumerate(symbols + [s + "</w>" for s in symbols])}
    vocab[BOS_TOKEN] = len(vocab)
    vocab[EOS_TOKEN] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tokenizer: CLIPTokenizer = CLIPTokenizer.from_pretrained(str(folder))
    return tokenizer


def load_tokenizer(folder_or_id: str | Path) -> CLIPTokenizer:
    """A CLIP tokenizer from a model folder or hub id (one sentence when it cannot be found)."""
    return load_pretrained(CLIPTokenizer, str(folder_or_id), "CLIP tokenizer", "the tokenizer")


def build_text_model(
    pretrained: str | None, tiny_config: dict[str, Any] | None, tokenizer: CLIPTokenizer
) -> CLIPTextModel:
    """The text encoder: the weights ``pretrained`` names (one sentence when they cannot be
    found), or with ``pretrained=None`` a randomly initialised model on purpose.

    tiny_config: CLIPTextConfig fields (hidden_size, num_hidden_layers, ...) of the fresh
    model; token ids (vocabulary size, BOS/EOS/padding) are taken from ``tokenizer``.
    """
    if pretrained:
        return load_pretrained(CLIPTextModel, pretrained, "CLIP text", "task.text_pretrained")
    fields = dict(tiny_config or {})
    fields.setdefault("max_position_embeddings", 77)
    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **fields,
    )
    return CLIPTextModel(config)


def extend_position_embeddings(model: CLIPTextModel, new_length: int) -> CLIPTextModel:
    """Grow the position table ``[L_old, D] -> [L_new, D]`` by linear interpolation, in place.

    New row ``i`` is the old table sampled at position ``i (L_old - 1) / (L_new - 1)`` (the first
    and last rows are kept exactly; ``align_corners=True``). Also updates ``position_ids`` and
    ``config.max_position_embeddings``. A table that already has ``new_length`` rows is left as is.
    """
    inner = getattr(model, "text_model", model)  # transformers < 5 wraps the transformer
    embeddings = inner.embeddings
    old = embeddings.position_embedding.weight.data
    if old.shape[0] == new_length:
        return model
    if new_length < 2:
        raise ValueError(f"new_length must be at least 2, got {new_length}")
    grown = F.interpolate(
        old.T.unsqueeze(0).float(), size=new_length, mode="linear", align_corners=True
    )[0].T.to(old.dtype)
    table = torch.nn.Embedding(new_length, old.shape[1], device=old.device, dtype=old.dtype)
    table.weight.data.copy_(grown)
    embeddings.position_embedding = table
    embeddings.position_ids = torch.arange(new_length, device=old.device).expand((1, -1))
    model.config.max_position_embeddings = new_length
    inner.config.max_position_embeddings = new_length
    return model
