"""TopKSigLIP: a mammography vision-language model with a TopK-Patch vision tower.

Vision tower (Sec. 3.2): the breast image ``[B, 1, S, S]`` (CC over MLO, S = 1536) is
downsized by ``low_res_factor`` (3 -> 512) and scored by ``f_g``, the ConvNeXt truncated before
its last stage, followed by a 1x1 convolution; the score map is sampled at the centres of the
``G x G`` candidate patches (G = 16) to give ``s [B, N]``. Importance weights are
``w = exp(s)`` (non-negative), so ``log w = s`` feeds :func:`gumbel_topk_relaxed` directly. K
patches (181 px, 50% overlap) are extracted from the full-resolution image (Eq. 4), encoded by
the same ConvNeXt ``f_l``, mean-pooled, projected and L2-normalised.

Text tower: CLIP's text encoder with a 170-token context, EOS pooling, a projection, L2 norm.
The similarity ``S_hat = z_v z_t^T`` is scaled by a learnable ``gamma`` (initialised at 10).

This module holds the configuration and the network; a model folder is written and read by
:mod:`medvl_engine.models.topksiglip_folder`, and :mod:`medvl_engine.models.topksiglip_inference`
turns one breast image into boxes and zero-shot readouts.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from transformers import BertModel, CLIPTextModel

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.encoders.resolve import TOPKSIGLIP_GRID, TOPKSIGLIP_MODEL_TYPE
from medvl_engine.models import _bert_text, _clip_text
from medvl_engine.models import convnext as _convnext
from medvl_engine.models.topk import (
    crop_patches,
    extract_patches,
    gumbel_topk_relaxed,
    hard_topk,
    selection_mask,
)

__all__ = [
    "MODEL_TYPE",
    "TopKSigLIP",
    "TopKSigLIPConfig",
    "VisionOutput",
    "build_topksiglip",
]

MODEL_TYPE = TOPKSIGLIP_MODEL_TYPE
"""The ``model_type`` that config.json of a TopKSigLIP folder carries."""


@dataclass
class TopKSigLIPConfig:
    """Architecture and vision-tower ablation switches of TopKSigLIP (the paper's values by
    default)."""

    # Vision tower.
    vision_pretrained: str | None = "facebook/convnext-tiny-224"
    vision_depths: list[int] = field(default_factory=lambda: [3, 3, 9, 3])
    vision_hidden_sizes: list[int] = field(default_factory=lambda: [96, 192, 384, 768])
    vision_layer_scale_init: float = 1e-6  # ConvNeXt's residual scale at random init
    # What the backbone's 3 input channels hold: the grey image 3 times ("gray", what
    # ImageNet weights expect), or the image and its 3 and 5 px white top-hats ("gray_tophat",
    # fine bright specks made explicit; for backbones trained from scratch).
    vision_input: _convnext.BackboneInput = "gray"
    vision_mode: Literal["topk", "full_image"] = "topk"
    full_image_resolution: int = 1024  # side of the resized image for vision_mode=full_image
    # Normalisation of the pooled features before the projection: "none" (the paper),
    # "batchnorm" (centres them over the batch, so a from-scratch backbone whose features share
    # a large common part still yields distinct embeddings) or "layernorm".
    vision_pool_norm: Literal["none", "batchnorm", "layernorm"] = "none"
    image_size: int = 1536  # breast image side S (CC on the top half, MLO below)
    grid: int = TOPKSIGLIP_GRID  # G: candidates per axis, N = G * G
    overlap: float = 0.5
    low_res_factor: int = 3  # scorer input side = S / low_res_factor
    k: int = 15  # patches sampled in training (free at inference)
    tau_start: float = 1.0
    tau_end: float = 2.0 / 3.0
    tau_anneal_steps: int = 100_000  # training forwards over which tau goes linearly start -> end
    # Text tower.
    text_family: Literal["clip", "bert"] = "clip"  # bert: e.g. "all-MiniLM-L6-v2", mean pooling
    text_pretrained: str | None = "openai/clip-vit-base-patch32"
    text_config: dict[str, Any] = field(default_factory=dict)  # fresh text-config fields
    context_length: int = 170
    freeze_text: bool = False  # train only the text projection (the encoder stays as loaded)
    # Joint space. The training objective is a task setting
    # (medvl_engine.tasks.topksiglip.config.TopKSigLIPTaskConfig); folders saved before it
    # moved there still carry its keys in config.json, which from_dict ignores.
    embed_dim: int = 512
    logit_scale_init: float = 10.0
    logit_bias_init: float | None = None  # None: no bias

    def geometry(self) -> PatchGeometry:
        return PatchGeometry.from_image(self.image_size, self.grid, self.overlap)

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": MODEL_TYPE, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TopKSigLIPConfig:
        """The config of a config.json; keys that are not fields (e.g. the training objective
        of older folders) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})


@dataclass
class VisionOutput:
    """What the vision tower returns for a batch of B breast images.

    embedding ``[B, C]`` (L2-normalised); log_weights ``[B, N]`` (``log w``, None for the
    full-image tower); e ``[B, K, N]`` (relaxed selections in training, one-hots at inference);
    indices ``[B, K]`` (argmax of each selection, the sampled candidates in order).
    """

    embedding: torch.Tensor
    log_weights: torch.Tensor | None = None
    e: torch.Tensor | None = None
    indices: torch.Tensor | None = None

    def selection(self) -> torch.Tensor | None:
        """Soft selection mask ``[B, N]`` (Eq. 6), or None without TopK-Patch."""
        return None if self.e is None else selection_mask(self.e)


class TopKSigLIP(nn.Module):
    """Vision tower (TopK-Patch or full image) + CLIP text tower + learnable logit scale."""

    train_forwards: torch.Tensor  # buffer registered in __init__

    def __init__(self, config: TopKSigLIPConfig, tokenizer: Any) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        self.geometry = config.geometry()
        self.backbone = _convnext.build_convnext(
            config.vision_depths,
            config.vision_hidden_sizes,
            config.vision_pretrained,
            layer_scale_init=config.vision_layer_scale_init,
        )
        widths = config.vision_hidden_sizes
        self.scorer_head = nn.Conv2d(widths[-2], 1, kernel_size=1)
        nn.init.zeros_(self.scorer_head.weight)
        if self.scorer_head.bias is not None:
            nn.init.zeros_(self.scorer_head.bias)
        self.pool_norm: nn.Module | None = {
            "none": None,
            "batchnorm": nn.BatchNorm1d(widths[-1]),
            "layernorm": nn.LayerNorm(widths[-1]),
        }[config.vision_pool_norm]
        self.vision_projection = nn.Linear(widths[-1], config.embed_dim)
        self.text_model: BertModel | CLIPTextModel
        if config.text_family == "bert":
            self.text_model = _bert_text.build_bert_model(
                config.text_pretrained, config.text_config
            )
        else:
            clip_text = _clip_text.build_text_model(
                config.text_pretrained, config.text_config, tokenizer
            )
            _clip_text.extend_position_embeddings(clip_text, config.context_length)
            self.text_model = clip_text
        if config.freeze_text:
            self.text_model.requires_grad_(False)
        # Frozen towers are deterministic in eval mode, so pooled features are cached per report.
        self._frozen_text_cache: dict[bytes, torch.Tensor] = {}
        self.text_projection = nn.Linear(self.text_model.config.hidden_size, config.embed_dim)
        self.log_logit_scale = nn.Parameter(torch.tensor(math.log(config.logit_scale_init)))
        self.logit_bias: nn.Parameter | None = None
        if config.logit_bias_init is not None:
            self.logit_bias = nn.Parameter(torch.tensor(float(config.logit_bias_init)))
        # Training forwards seen so far; drives the tau schedule and is saved with the weights.
        self.register_buffer("train_forwards", torch.zeros((), dtype=torch.long))

    # -- schedule ---------------------------------------------------------------------------
    def tau(self) -> float:
        """Current TopK temperature: linear from tau_start to tau_end over tau_anneal_steps."""
        steps = max(self.config.tau_anneal_steps, 1)
        progress = min(float(self.train_forwards.item()) / steps, 1.0)
        return self.config.tau_start + (self.config.tau_end - self.config.tau_start) * progress

    @property
    def logit_scale(self) -> torch.Tensor:
        return self.log_logit_scale.exp()

    # -- vision -----------------------------------------------------------------------------
    def _pixels(self, images: torch.Tensor) -> torch.Tensor:
        """Grey images ``[B, 1, H, W]`` -> backbone input ``[B, 3, H, W]`` (``vision_input``)."""
        return _convnext.backbone_input(images, self.config.vision_input)

    def importance_logits(self, images: torch.Tensor) -> torch.Tensor:
        """``log w [B, N]`` from the low-resolution image (scorer ``f_g``).

        images: ``[B, 1, S, S]`` in ``[0, 1]``. The stage-3 map ``[B, C3, h, w]`` goes through a
        1x1 convolution, a 3x3 mean filter, and is sampled (bilinear) at the N candidate
        centres, so score n describes the region of candidate n.
        """
        side = self.config.image_size // self.config.low_res_factor
        low = F.interpolate(
            images, size=(side, side), mode="bilinear", antialias=True, align_corners=False
        )
        stages = len(self.backbone.encoder.stages)
        features = _convnext.run_stages(self.backbone, self._pixels(low), stages - 1)
        scores = F.avg_pool2d(
            self.scorer_head(features), 3, stride=1, padding=1, count_include_pad=False
        )
        geom = self.geometry
        centres = torch.as_tensor(geom.origins(), dtype=scores.dtype, device=scores.device)
        centres = (centres + geom.patch_size / 2.0) / geom.image_size * 2.0 - 1.0  # [-1, 1]
        grid = centres.view(1, 1, -1, 2).expand(scores.shape[0], -1, -1, -1)
        sampled = F.grid_sample(scores, grid, mode="bilinear", align_corners=False)
        return sampled.view(scores.shape[0], -1)

    def encode_patches(self, patches: torch.Tensor) -> torch.Tensor:
        """Patches ``[B, K, 1, P, P]`` -> mean-pooled backbone features ``[B, C_last]``."""
        b, k = patches.shape[:2]
        flat = patches.reshape(b * k, *patches.shape[2:])
        features = _convnext.pooled_features(self.backbone, self._pixels(flat))
        return features.view(b, k, -1).mean(dim=1)

    def encode_image(self, images: torch.Tensor, k: int | None = None) -> VisionOutput:
        """Embed breast images ``[B, 1, S, S]`` in ``[0, 1]``.

        In training mode (TopK-Patch): Gumbel noise, relaxed selections at the current tau and
        soft patches (Eq. 2-4). In eval mode: the hard top-K of ``log w`` without noise and plain
        crops (k defaults to ``config.k`` and may be changed freely at inference).
        """
        if images.ndim != 4 or images.shape[1] != 1:
            raise ValueError(f"images must be [B, 1, S, S], got {tuple(images.shape)}")
        if self.config.vision_mode == "full_image":
            side = self.config.full_image_resolution
            resized = images
            if images.shape[-1] != side:
                resized = F.interpolate(
                    images, size=(side, side), mode="bilinear", antialias=True, align_corners=False
                )
            pooled = _convnext.pooled_features(self.backbone, self._pixels(resized))
            return VisionOutput(self._project(pooled))
        k = k or self.config.k
        log_weights = self.importance_logits(images)
        if self.training:
            e = gumbel_topk_relaxed(log_weights, k, self.tau())
            patches = extract_patches(images, e, self.geometry)
            self.train_forwards += 1
            indices = e.argmax(dim=-1)
        else:
            indices = hard_topk(log_weights, k)
            e = F.one_hot(indices, self.geometry.num_candidates).to(log_weights.dtype)
            patches = crop_patches(images, indices, self.geometry)
        embedding = self._project(self.encode_patches(patches))
        return VisionOutput(embedding, log_weights, e, indices)

    def _project(self, pooled: torch.Tensor) -> torch.Tensor:
        """Pooled features ``[B, C_last]`` -> (pool norm) -> projection -> L2 norm ``[B, C]``."""
        if self.pool_norm is not None:
            pooled = self.pool_norm(pooled)
        return F.normalize(self.vision_projection(pooled), dim=-1)

    # -- text -------------------------------------------------------------------------------
    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """Token ids and attention mask ``[T, L]``: padded to the longest, L <= context_length."""
        encoded = self.tokenizer(
            list(texts),
            padding="longest",
            truncation=True,
            max_length=self.config.context_length,
            return_tensors="pt",
        )
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids ``[T, L]`` -> L2-normalised text embeddings ``[T, C]``.

        CLIP: the hidden state at the EOS token; BERT: the mean over real tokens.
        """
        if self.config.freeze_text:
            pooled = self._frozen_text_features(input_ids, attention_mask)
        else:
            pooled = self._text_features(input_ids, attention_mask)
        return F.normalize(self.text_projection(pooled), dim=-1)

    def _text_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.text_model(input_ids=input_ids, attention_mask=attention_mask)
        if self.config.text_family == "bert":
            return _bert_text.masked_mean(out.last_hidden_state, attention_mask)
        result: torch.Tensor = out.pooler_output
        return result

    @torch.no_grad()
    def _frozen_text_features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        pairs = zip(input_ids, attention_mask, strict=True)
        keys = [ids[mask.bool()].cpu().numpy().tobytes() for ids, mask in pairs]
        missing = [i for i, key in enumerate(keys) if key not in self._frozen_text_cache]
        if missing:
            self.text_model.train(False)  # eval mode: no dropout in a frozen tower
            fresh = self._text_features(input_ids[missing], attention_mask[missing])
            for i, row in zip(missing, fresh, strict=True):
                self._frozen_text_cache[keys[i]] = row.detach()
        return torch.stack([self._frozen_text_cache[key] for key in keys])

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        """Texts -> L2-normalised embeddings ``[T, C]`` on the model's device."""
        tokens = self.tokenize(texts)
        device = self.log_logit_scale.device
        return self.encode_tokens(
            tokens["input_ids"].to(device), tokens["attention_mask"].to(device)
        )

    def forward(
        self, images: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[VisionOutput, torch.Tensor]:
        """Images ``[B, 1, S, S]``, report tokens ``[B, L]`` -> (VisionOutput, z_t ``[B, C]``)."""
        return self.encode_image(images), self.encode_tokens(input_ids, attention_mask)


def build_topksiglip(
    config: TopKSigLIPConfig,
    tokenizer_source: str | Path | None = None,
    work_dir: str | Path | None = None,
) -> TopKSigLIP:
    """A new model: the pretrained towers the config names, random init where it names none.

    Named weights or tokenizers that cannot be found stop with one sentence (no silent random
    init). The tokenizer comes from ``tokenizer_source`` (folder or hub id), else from
    ``config.text_pretrained``; with neither, a byte-level tokenizer is written to ``work_dir``
    (a temporary folder when None).
    """
    if config.text_family == "bert":
        source = tokenizer_source or config.text_pretrained
        if not source:
            raise ValueError("a BERT text tower needs text_pretrained (e.g. 'all-MiniLM-L6-v2')")
        return TopKSigLIP(config, _bert_text.load_bert_tokenizer(source))
    source = tokenizer_source or config.text_pretrained
    if source:
        tokenizer = _clip_text.load_tokenizer(source)
    else:
        folder = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="medvl-tok-"))
        tokenizer = _clip_text.write_byte_level_tokenizer(folder)
    return TopKSigLIP(config, tokenizer)
