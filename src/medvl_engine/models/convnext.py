"""ConvNeXt backbone of the TopKSigLIP vision tower (transformers ``ConvNextModel``).

Grayscale mammograms ``[B, 1, H, W]`` in ``[0, 1]`` are repeated to 3 channels and normalised
with the ImageNet statistics the pretrained weights expect (``"gray"``), or, for backbones
trained from scratch, given as the image and two white top-hats that keep only bright
structures smaller than 3 and 5 px (``"gray_tophat"``, the classic enhancement of
microcalcifications).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from medvl_engine.common.hf_classes import ConvNextConfig, ConvNextModel
from medvl_engine.errors import ConfigError
from medvl_engine.models._pretrained import load_pretrained

__all__ = [
    "CONVNEXT_TINY",
    "BackboneInput",
    "backbone_input",
    "build_convnext",
    "grayscale_to_input",
    "pooled_features",
    "run_stages",
    "white_tophat",
]

BackboneInput = Literal["gray", "gray_tophat"]

# ConvNeXt-Tiny (Liu et al. 2022), the paper's vision encoder.
CONVNEXT_TINY = {"depths": [3, 3, 9, 3], "hidden_sizes": [96, 192, 384, 768]}
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
_TOPHAT_SIZES = (3, 5)
_TOPHAT_STD = 0.1  # a speck 0.3 above its surroundings reads 3


def build_convnext(
    depths: list[int],
    hidden_sizes: list[int],
    pretrained: str | None = None,
    layer_scale_init: float = 1e-6,
) -> ConvNextModel:
    """A ConvNeXt with the given stage depths and widths.

    pretrained: a Hugging Face id or local folder (e.g. ``facebook/convnext-tiny-224``) whose
    weights are loaded (from disk, the Hugging Face cache, or the hub when online); weights that
    cannot be found, or whose shape differs from ``depths`` / ``hidden_sizes``, stop with one
    sentence. None: random initialisation on purpose (residual branches scaled by
    ``layer_scale_init``; ConvNeXt's 1e-6 suits long runs, small from-scratch runs learn faster
    with ~0.1).
    """
    if pretrained:
        model = load_pretrained(ConvNextModel, pretrained, "ConvNeXt", "task.vision_pretrained")
        shape = (list(model.config.depths or []), list(model.config.hidden_sizes or []))
        if shape != (list(depths), list(hidden_sizes)):
            raise ConfigError(
                f"ConvNeXt weights {pretrained} have depths {shape[0]} and widths {shape[1]}, "
                f"not the configured {list(depths)} and {list(hidden_sizes)}; set "
                "task.vision_depths / task.vision_hidden_sizes to match them, or "
                "task.vision_pretrained=null to train from random initialisation on purpose."
            )
        return model
    config = ConvNextConfig(
        depths=list(depths),
        hidden_sizes=list(hidden_sizes),
        num_channels=3,
        layer_scale_init_value=layer_scale_init,
    )
    return ConvNextModel(config)


def grayscale_to_input(images: torch.Tensor) -> torch.Tensor:
    """``[B, 1, H, W]`` in ``[0, 1]`` -> ``[B, 3, H, W]`` ImageNet-normalised."""
    mean = torch.tensor(_IMAGENET_MEAN, device=images.device, dtype=images.dtype).view(1, 3, 1, 1)
    std = torch.tensor(_IMAGENET_STD, device=images.device, dtype=images.dtype).view(1, 3, 1, 1)
    return (images.expand(-1, 3, -1, -1) - mean) / std


def white_tophat(images: torch.Tensor, size: int) -> torch.Tensor:
    """``x - opening(x)`` with a flat ``size x size`` square: ``[B, C, H, W]`` -> same shape.

    Grey-scale opening is erosion (minimum filter) then dilation (maximum filter); what is left
    is the bright structures narrower than ``size`` px, above their local background. Nothing
    is padded in: near the border the filters use only the pixels inside, so a flat crop gives
    0 and a speck away from the crop's edge keeps the value it has in the whole image.
    """
    pad = size // 2
    eroded = -F.max_pool2d(-images, size, stride=1, padding=pad)
    opened = F.max_pool2d(eroded, size, stride=1, padding=pad)
    return images - opened


def backbone_input(images: torch.Tensor, kind: BackboneInput = "gray") -> torch.Tensor:
    """``[B, 1, H, W]`` in ``[0, 1]`` -> the backbone's ``[B, 3, H, W]``.

    ``"gray"``: :func:`grayscale_to_input`. ``"gray_tophat"``: the image (ImageNet-normalised
    like the first channel of ``"gray"``) and its white top-hats of 3 and 5 px divided by 0.1.
    """
    if kind == "gray":
        return grayscale_to_input(images)
    if kind != "gray_tophat":
        raise ConfigError(f"backbone input {kind!r} is not one of 'gray', 'gray_tophat'.")
    gray = (images - _IMAGENET_MEAN[0]) / _IMAGENET_STD[0]
    hats = [white_tophat(images, size) / _TOPHAT_STD for size in _TOPHAT_SIZES]
    return torch.cat([gray, *hats], dim=1)


def run_stages(backbone: ConvNextModel, pixels: torch.Tensor, num_stages: int) -> torch.Tensor:
    """Feature map after the stem and the first ``num_stages`` stages: ``[B, C_s, h, w]``."""
    hidden: torch.Tensor = backbone.embeddings(pixels)
    for stage in list(backbone.encoder.stages)[:num_stages]:
        hidden = stage(hidden)
    return hidden


def pooled_features(backbone: ConvNextModel, pixels: torch.Tensor) -> torch.Tensor:
    """Full backbone, global average pool and final LayerNorm: ``[B, C_last]``."""
    hidden = run_stages(backbone, pixels, len(backbone.encoder.stages))
    pooled: torch.Tensor = backbone.layernorm(hidden.mean(dim=(-2, -1)))
    return pooled
