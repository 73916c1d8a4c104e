"""Tiny offline text towers and feature stores for the LIMIT tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

WORDS = (
    "tumor carcinoma stroma lymphocytes adipose necrosis fat tissue breast lung colon "
    "invasive benign no seen present with and of the a is in"
).split()


def tiny_tower(folder: Path, *, hidden: int = 32, out_dim: int | None = 16, seed: int = 0):
    """A randomly initialised 2-layer BERT + word-piece tokenizer saved to and loaded from disk."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from medvl_engine.encoders import TextTower

    folder.mkdir(parents=True, exist_ok=True)
    letters = list("abcdefghijklmnopqrstuvwxyz0123456789.,:;-")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *letters]
    vocab += [f"##{c}" for c in letters]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)  # keyword is ignored
    backbone = BertModel.from_pretrained(folder, local_files_only=True)
    tokenizer = BertTokenizerFast.from_pretrained(folder, local_files_only=True)
    projection = torch.nn.Linear(hidden, out_dim, bias=False) if out_dim else None
    return TextTower(backbone, tokenizer, pooling="mean", projection=projection, max_length=64)


def write_feature_store(path: Path, features: np.ndarray, *, slide: str = "slide") -> Path:
    """A zarr feature store: "features" [N, D] float32, "coords" [N, 2] int64 (x, y) level 0."""
    import zarr

    group = zarr.open_group(str(path), mode="w")
    group.create_array("features", data=features.astype(np.float32))
    coords = np.stack([np.arange(len(features)) * 448, np.zeros(len(features))], axis=1)
    group.create_array("coords", data=coords.astype(np.int64))
    group.attrs.update(
        {
            "patch_size_level0": 448,
            "patch_size": 448,
            "target_mpp": 0.5,
            "encoder": "toy",
            "slide": slide,
        }
    )
    return path
