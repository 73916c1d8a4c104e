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


def tiny_values(**overrides) -> dict:
    """Settings of a 256 px breast image, 8x8 grid, K = 3, ConvNeXt of width 8..64, tiny CLIP."""
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
    return values


def tiny_config(**overrides) -> TopKSigLIPConfig:
    """The tiny model configuration of :func:`tiny_values`."""
    return TopKSigLIPConfig(**tiny_values(**overrides))


def tiny_model(tmp_path: Path, **overrides) -> TopKSigLIP:
    return build_topksiglip(tiny_config(**overrides), work_dir=tmp_path / "tokenizer")


def make_brightness_scorer(model: TopKSigLIP) -> TopKSigLIP:
    """Hand-set the scorer f_g so that log w grows with the local mean brightness.

    Stem: channel 0 = mean of the 4x4 normalised pixels, channel 1 = constant 1, others 0; the
    stem LayerNorm then turns channel 0 into an increasing function of brightness. Every residual
    block is switched off (layer scale 0) and each downsampling keeps channel 0 as the 2x2 mean
    with channel 1 = 1 again; the 1x1 head reads channel 0.
    """
    import torch

    backbone = model.backbone
    with torch.no_grad():
        stem = backbone.embeddings.patch_embeddings
        stem.weight.zero_()
        stem.bias.zero_()
        stem.weight[0].fill_(1.0 / stem.weight[0].numel())
        stem.bias[1] = 1.0
        for stage in backbone.encoder.stages:
            for layer in stage.layers:
                layer.layer_scale_parameter.zero_()
            down = getattr(stage, "downsampling_layer", None)
            convs = [m for m in (down or []) if isinstance(m, torch.nn.Conv2d)]
            for conv in convs:
                conv.weight.zero_()
                conv.bias.zero_()
                conv.weight[0, 0].fill_(1.0 / conv.weight[0, 0].numel())
                conv.bias[1] = 1.0
        model.scorer_head.weight.zero_()
        model.scorer_head.weight[0, 0] = 1.0
        model.scorer_head.bias.zero_()
    return model
