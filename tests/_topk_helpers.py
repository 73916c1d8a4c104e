"""Tiny TopKSigLIP configurations for fast CPU tests."""

from __future__ import annotations

from pathlib import Path

from medvl_engine.models.topksiglip import TopKSigLIP, TopKSigLIPConfig, build_topksiglip

TINY_TEXT = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": 77,
}


def tiny_config(**overrides) -> TopKSigLIPConfig:
    """A 256 px breast image, 8x8 grid, K = 3, 4-stage ConvNeXt of width 8..64, tiny CLIP text."""
    values = dict(
        vision_pretrained=None,
        vision_depths=[1, 1, 1, 1],
        vision_hidden_sizes=[8, 16, 32, 64],
        image_size=256,
        grid=8,
        low_res_factor=2,
        k=3,
        tau_anneal_steps=10,
        text_pretrained=None,
        text_config=dict(TINY_TEXT),
        context_length=96,
        embed_dim=16,
    )
    values.update(overrides)
    return TopKSigLIPConfig(**values)


def tiny_model(tmp_path: Path, **overrides) -> TopKSigLIP:
    return build_topksiglip(tiny_config(**overrides), work_dir=tmp_path / "tokenizer")
