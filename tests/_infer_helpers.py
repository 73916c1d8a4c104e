"""Tiny randomly initialised models saved as real model folders, for offline tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch


def write_byte_bpe_tokenizer(folder: Path) -> int:
    """Write the byte-level CLIP tokenizer files (514 ids, no merges); return the vocab size."""
    from medvl_engine.models._clip_text import write_byte_level_tokenizer

    return len(write_byte_level_tokenizer(folder))


def make_tiny_clip(folder: Path, image_size: int = 32, projection_dim: int = 16) -> Path:
    """Save a random CLIPModel + CLIPTokenizer + preprocessor_config.json to ``folder``."""
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_byte_bpe_tokenizer(folder)
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    config = CLIPConfig(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 64,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": image_size,
            "patch_size": 8,
        },
        projection_dim=projection_dim,
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "CLIPImageProcessor",
                "do_resize": True,
                "size": {"shortest_edge": image_size},
                "do_center_crop": True,
                "crop_size": {"height": image_size, "width": image_size},
                "do_normalize": True,
                "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "resample": 3,
                "rescale_factor": 1 / 255,
            }
        )
    )
    return folder


def make_tiny_bert_tower(out_dim: int):
    """A random 1-layer BertModel + WordPiece tokenizer as a TextTower -> [T, out_dim]."""
    import tempfile

    from transformers import BertConfig, BertModel, BertTokenizer

    from medvl_engine.encoders import TextTower

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz")
    words += ["tumor", "stroma", "fat", "necrosis", "lymphocytes", "##s", "##e"]
    with tempfile.TemporaryDirectory() as scratch:
        vocab = Path(scratch) / "vocab.txt"
        vocab.write_text("\n".join(words) + "\n")
        tokenizer = BertTokenizer(str(vocab))
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=24,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(1)
    projection = torch.nn.Linear(24, out_dim, bias=True)
    return TextTower(
        BertModel(config), tokenizer, pooling="cls", projection=projection, max_length=32
    )


_DEMO_CACHE: dict[str, object] = {}


def demo_encoder():
    """The real "medvl-demo" encoder, built once per test process into a temporary cache."""
    import os
    import tempfile

    from medvl_engine.encoders import load_encoder

    if "encoder" not in _DEMO_CACHE:
        if "MEDVL_CACHE" not in os.environ:
            os.environ["MEDVL_CACHE"] = tempfile.mkdtemp(prefix="medvl-test-cache-")
        _DEMO_CACHE["encoder"] = load_encoder("medvl-demo")
    return _DEMO_CACHE["encoder"]


class RegularGrid:
    """A plain patch grid at level 0: every (x, y) multiple of ``stride`` whose patch fits."""

    def __init__(self, dimensions: tuple[int, int], patch_size: int, stride: int | None = None):
        stride = stride or patch_size
        width, height = dimensions
        xs = np.arange(0, width - patch_size + 1, stride)
        ys = np.arange(0, height - patch_size + 1, stride)
        grid_y, grid_x = np.meshgrid(ys, xs, indexing="ij")
        self.coords = np.stack([grid_x.ravel(), grid_y.ravel()], axis=1).astype(np.int64)
        self.patch_size = patch_size
        self.patch_size_level0 = patch_size
        self.level = 0
        self.target_mpp = 0.5
