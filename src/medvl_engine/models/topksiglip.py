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

A model is a directory: ``config.json`` (:class:`TopKSigLIPConfig`), ``model.safetensors`` and
the tokenizer files; :func:`save_topksiglip` / :func:`load_topksiglip` write and read it offline.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import BertConfig

from medvl_engine._atomic import atomic_directory
from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.errors import ConfigError, ModelNotFoundError
from medvl_engine.models import _bert_text, _clip_text, _convnext
from medvl_engine.models.topk import (
    crop_patches,
    extract_patches,
    gumbel_topk_relaxed,
    hard_topk,
    selection_mask,
)

__all__ = [
    "DEMO_MODEL",
    "TopKResult",
    "TopKSigLIP",
    "TopKSigLIPConfig",
    "VisionOutput",
    "build_topksiglip",
    "registered_model_dir",
    "load_topksiglip",
    "predict_topk",
    "resolve_model",
    "save_topksiglip",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MODEL_TYPE = "medvl-topksiglip"
TEXT_REFERENCE_KEY = "text_reference"
"""config.json key naming a pretrained frozen text tower that the folder does not copy."""
_TEXT_PREFIX = "text_model."

DEMO_MODEL = "topksiglip-demo"
"""The shipped demo model (medvl_engine.demo_models), found with no training and no network."""


def _shipped_demo_folder() -> Path:
    from medvl_engine.demo_models import SHIPPED_ROOT

    return SHIPPED_ROOT / DEMO_MODEL


# Named models: name -> model folder (the shipped demo lives inside the package).
MODEL_REGISTRY: dict[str, str] = {DEMO_MODEL: str(_shipped_demo_folder())}


@dataclass
class TopKSigLIPConfig:
    """Architecture and vision-tower ablation switches of TopKSigLIP (the paper's values by
    default)."""

    # Vision tower.
    vision_pretrained: str | None = "facebook/convnext-tiny-224"
    vision_depths: list[int] = field(default_factory=lambda: [3, 3, 9, 3])
    vision_hidden_sizes: list[int] = field(default_factory=lambda: [96, 192, 384, 768])
    vision_layer_scale_init: float = 1e-6  # ConvNeXt's residual scale at random init
    vision_mode: Literal["topk", "full_image"] = "topk"
    full_image_resolution: int = 1024  # side of the resized image for vision_mode=full_image
    # Normalisation of the pooled features before the projection: "none" (the paper),
    # "batchnorm" (centres them over the batch, so a from-scratch backbone whose features share
    # a large common part still yields distinct embeddings) or "layernorm".
    vision_pool_norm: Literal["none", "batchnorm", "layernorm"] = "none"
    image_size: int = 1536  # breast image side S (CC on the top half, MLO below)
    grid: int = 16  # G: candidates per axis, N = G * G
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
    # (medvl_engine.training.topksiglip_task.TopKSigLIPTaskConfig); folders saved before it
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
        nn.init.zeros_(self.scorer_head.bias)
        self.pool_norm: nn.Module | None = {
            "none": None,
            "batchnorm": nn.BatchNorm1d(widths[-1]),
            "layernorm": nn.LayerNorm(widths[-1]),
        }[config.vision_pool_norm]
        self.vision_projection = nn.Linear(widths[-1], config.embed_dim)
        if config.text_family == "bert":
            self.text_model = _bert_text.build_bert_model(
                config.text_pretrained, config.text_config
            )
        else:
            self.text_model = _clip_text.build_text_model(
                config.text_pretrained, config.text_config, tokenizer
            )
            _clip_text.extend_position_embeddings(self.text_model, config.context_length)
        if config.freeze_text:
            self.text_model.requires_grad_(False)
        # Frozen towers are deterministic in eval mode, so pooled features are cached per report.
        self._frozen_text_cache: dict[bytes, torch.Tensor] = {}
        self.text_projection = nn.Linear(self.text_model.config.hidden_size, config.embed_dim)
        self.log_logit_scale = nn.Parameter(torch.tensor(math.log(config.logit_scale_init)))
        if config.logit_bias_init is not None:
            self.logit_bias = nn.Parameter(torch.tensor(float(config.logit_bias_init)))
        else:
            self.logit_bias = None
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
        features = _convnext.run_stages(
            self.backbone, _convnext.grayscale_to_input(low), stages - 1
        )
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
        features = _convnext.pooled_features(self.backbone, _convnext.grayscale_to_input(flat))
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
            pooled = _convnext.pooled_features(self.backbone, _convnext.grayscale_to_input(resized))
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
        return out.pooler_output

    @torch.no_grad()
    def _frozen_text_features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        pairs = zip(input_ids, attention_mask, strict=True)
        keys = [ids[mask.bool()].cpu().numpy().tobytes() for ids, mask in pairs]
        missing = [i for i, key in enumerate(keys) if key not in self._frozen_text_cache]
        if missing:
            self.text_model.eval()  # no dropout in a frozen tower
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


def _is_packaged_minilm(text_model: nn.Module) -> bool:
    """True when ``text_model`` holds exactly the weights of the packaged all-MiniLM-L6-v2."""
    reference = _bert_text.build_bert_model(_bert_text.MINILM, {}).state_dict()
    state = text_model.state_dict()
    return state.keys() == reference.keys() and all(
        state[key].shape == reference[key].shape and torch.equal(state[key], reference[key])
        for key in state
    )


def save_topksiglip(
    model: TopKSigLIP,
    directory: str | Path,
    *,
    text_by_reference: bool = False,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """Write ``config.json``, ``model.safetensors`` and the tokenizer into ``directory``.

    Files are written to a temporary sibling folder that then replaces ``directory``, so an
    interrupted save never leaves a half-written model. ``text_by_reference`` (a frozen
    :data:`~medvl_engine.models._bert_text.MINILM` text tower only) stores the tower and its
    tokenizer as the name ``text_reference`` in config.json instead of copying them: the folder
    then holds only the trained parameters. ``extra_config`` adds keys to config.json.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    reference = None
    if text_by_reference:
        if not (
            model.config.text_family == "bert"
            and model.config.freeze_text
            and _is_packaged_minilm(model.text_model)
        ):
            raise ValueError(
                f"only a frozen {_bert_text.MINILM} text tower, unchanged, can be saved by "
                "reference"
            )
        reference = _bert_text.MINILM

    def fill(staging: Path) -> None:
        config = dataclasses.replace(model.config, vision_pretrained=None, text_pretrained=None)
        text_fields = model.text_model.config.to_dict()
        if model.config.text_family == "bert":
            config.text_config = {
                key: value
                for key, value in text_fields.items()
                if key in BertConfig().to_dict()
                and key not in ("architectures", "transformers_version")
            }
        else:
            keep = (
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "hidden_act",
                "layer_norm_eps",
                "projection_dim",
            )
            config.text_config = {key: text_fields[key] for key in keep if key in text_fields}
            config.text_config["max_position_embeddings"] = model.config.context_length
        values = config.to_dict()
        if reference is not None:
            values[TEXT_REFERENCE_KEY] = reference
        values.update(extra_config or {})
        (staging / CONFIG_NAME).write_text(json.dumps(values, indent=2), encoding="utf-8")
        state = {
            key: value.detach().cpu().contiguous()
            for key, value in model.state_dict().items()
            if reference is None or not key.startswith(_TEXT_PREFIX)
        }
        save_file(state, str(staging / WEIGHTS_NAME))
        if reference is None:
            model.tokenizer.save_pretrained(str(staging))

    return atomic_directory(directory, fill, what="TopKSigLIP model")


def registered_model_dir(name: str) -> Path:
    """Cache folder ``<MEDVL_CACHE>/models/<name>`` into which a run's ``install_as`` installs
    its final model (independent of the cwd). The shipped demo's name is refused: that model
    is rebuilt with ``make demo-models``, never replaced from a training run."""
    from medvl_engine._cache import cache_dir

    if name in MODEL_REGISTRY:
        raise ModelNotFoundError(
            f"{name} is the shipped demo model and cannot be installed over; give install_as "
            "another name, or rebuild the demo with `make demo-models`."
        )
    if not name or Path(name).name != name or name in (".", ".."):
        raise ModelNotFoundError(
            f"{name!r} is not a usable model name; give a plain name such as 'my-topksiglip'."
        )
    return cache_dir() / "models" / name


def resolve_model(name_or_path: str | Path) -> Path:
    """Folder of a model given a path, the shipped demo's name, or a name installed by a run.

    ``topksiglip-demo`` resolves to the folder shipped inside the package (no training, no
    network); a missing shipped folder is an error naming ``make demo-models``. Another name
    resolves to ``<MEDVL_CACHE>/models/<name>`` when a run's ``install_as`` filled it.
    """
    path = Path(name_or_path)
    if path.is_dir():
        return path
    name = str(name_or_path)
    if name == DEMO_MODEL:
        from medvl_engine.demo_models import shipped_model_dir

        folder = shipped_model_dir(DEMO_MODEL)
        if folder is None:
            raise ModelNotFoundError(
                f"the shipped demo model {DEMO_MODEL} is missing from {_shipped_demo_folder()}; "
                "rebuild it with `make demo-models` (python -m medvl_engine.training.demo_models "
                f"{DEMO_MODEL}).",
                _shipped_demo_folder(),
            )
        return folder
    installed = None
    if name and Path(name).name == name and name not in (".", ".."):
        from medvl_engine._cache import cache_dir

        installed = cache_dir() / "models" / name
        if installed.is_dir():
            return installed
    hint = f" (nor as {installed}, where install_as puts a trained model)" if installed else ""
    raise ModelNotFoundError(
        f"TopKSigLIP model {name_or_path} was not found{hint}; pass a model folder holding "
        f"{CONFIG_NAME} and {WEIGHTS_NAME}, or {DEMO_MODEL}.",
        path,
    )


def _text_reference(folder: Path) -> str | None:
    """The referenced text tower of a model folder (only :data:`_bert_text.MINILM` is accepted),
    or None when the folder holds its own text tower."""
    try:
        values = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # check_model_folder reports a missing or malformed config.json
    reference = values.get(TEXT_REFERENCE_KEY) if isinstance(values, dict) else None
    if reference is None:
        return None
    if reference != _bert_text.MINILM or values.get("text_family") != "bert":
        raise ModelNotFoundError(
            f"{folder / CONFIG_NAME} references the text tower {reference!r}; only "
            f"{_bert_text.MINILM!r} (a BERT tower) can be referenced, so pass a folder that holds "
            "its text tower.",
            folder / CONFIG_NAME,
        )
    return reference


def load_topksiglip(name_or_path: str | Path, device: str | torch.device = "cpu") -> TopKSigLIP:
    """Load a model directory written by :func:`save_topksiglip` (offline, eval mode).

    The folder is data only (see :mod:`medvl_engine.encoders._folder_checks`): no code, weights
    from model.safetensors, the architecture from :class:`TopKSigLIPConfig`; pretrained-source
    fields in its config.json are ignored, so loading never downloads or falls back.
    """
    from medvl_engine.encoders._folder_checks import (
        check_model_folder,
        folder_errors,
        load_tokenizer,
        load_weights,
        weights_mismatch,
    )

    folder = resolve_model(name_or_path)
    config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    if not config_path.is_file() or not weights_path.is_file():
        raise ModelNotFoundError(
            f"model folder {folder} lacks {CONFIG_NAME} or {WEIGHTS_NAME}; pass a folder saved by "
            "medvl-train topksiglip.",
            folder,
        )
    reference = _text_reference(folder)
    values = check_model_folder(folder, needs_tokenizer=reference is None)
    if values.get("model_type") != MODEL_TYPE:
        raise ModelNotFoundError(
            f"{config_path} is not a TopKSigLIP config (model_type {values.get('model_type')!r}); "
            "pass a TopKSigLIP model folder.",
            config_path,
        )
    with folder_errors(folder, "TopKSigLIP settings"):
        config = TopKSigLIPConfig.from_dict(values)
        config = dataclasses.replace(config, vision_pretrained=None, text_pretrained=reference)
    if reference is not None:  # the installed MiniLM package provides tower and tokenizer
        tokenizer = _bert_text.load_bert_tokenizer(reference)
    else:
        tokenizer = load_tokenizer(
            folder,
            lambda: (
                _bert_text.load_bert_tokenizer(folder)
                if config.text_family == "bert"
                else _clip_text.load_tokenizer(folder)
            ),
        )
    with folder_errors(folder, "TopKSigLIP settings"):
        model = TopKSigLIP(config, tokenizer)
    state = load_weights(folder)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:  # tensors of the wrong shape for the sizes in config.json
        raise weights_mismatch(weights_path, [], []) from error
    real_missing = [
        key
        for key in missing
        if not key.endswith("position_ids")
        and not (reference is not None and key.startswith(_TEXT_PREFIX))
    ]
    if real_missing or unexpected:
        raise weights_mismatch(weights_path, real_missing, list(unexpected))
    return model.to(device).eval()


# -- inference ----------------------------------------------------------------------------------


class BreastLike(Protocol):
    """A breast image (CC on top, MLO below) that maps its pixels back to each source view."""

    image: np.ndarray

    def to_source(self, view: str, points_xy: np.ndarray) -> np.ndarray: ...


@dataclass
class TopKResult:
    """Top-K patches of one breast image, in each source view's own pixels.

    boxes: ``{"CC": [M, 4], "MLO": [M', 4]}`` ``(x0, y0, x1, y1)`` source px of that view;
    ranks / scores: matching ``{"CC": [M], ...}`` (rank 1 = first sampled; score = the
    Plackett-Luce first-draw probability ``w_n / sum w``); breast_boxes ``[K, 4]`` in breast-image
    px, in rank order; importance ``[G, G]`` float32 = ``w / sum w`` on the candidate grid;
    cell_bounds ``[G + 1]`` float64: edges of the importance cells in breast-image px, the same
    on both axes (cell (r, c) covers x in ``[b[c], b[c + 1])``, y in ``[b[r], b[r + 1])``; the
    outer cells are wider, see :meth:`PatchGeometry.cell_bounds`); zero_shot:
    ``{task: {class: probability}}`` from the paper's prompts; embedding ``[C]``.
    """

    boxes: dict[str, np.ndarray]
    ranks: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]
    breast_boxes: np.ndarray
    breast_scores: np.ndarray
    importance: np.ndarray
    cell_bounds: np.ndarray
    zero_shot: dict[str, dict[str, float]]
    embedding: np.ndarray


def _view_of(box: np.ndarray, size: int) -> str:
    return "CC" if (box[1] + box[3]) / 2.0 < size / 2.0 else "MLO"


@torch.no_grad()
def predict_topk(
    model: TopKSigLIP, breast: BreastLike | np.ndarray, k: int = 15, zero_shot: bool = True
) -> TopKResult:
    """Run TopK-Patch on one breast image and map the K boxes back to their source views.

    breast: a BreastImage (``image`` float32 ``[S', S']`` in [0, 1], ``to_source``) or a bare
    ``[S', S']`` array (boxes then stay in breast px for both views). The image is resized to
    the model's side S when needed; boxes are scaled back. A box is assigned to the view (top
    half CC, bottom half MLO) holding its centre, clipped to that half, and its corners mapped.
    """
    image = np.asarray(getattr(breast, "image", breast), dtype=np.float32)
    if image.ndim != 2 or image.shape[0] != image.shape[1]:
        raise ValueError(f"breast image must be square [S, S], got {image.shape}")
    if not 1 <= k <= model.geometry.num_candidates:
        raise ConfigError(
            f"k={k} is outside 1..{model.geometry.num_candidates}, the model's candidate patches; "
            "choose a smaller k."
        )
    model.eval()
    device = model.log_logit_scale.device
    side = model.config.image_size
    tensor = torch.from_numpy(image).to(device)[None, None]
    if image.shape[0] != side:
        tensor = F.interpolate(
            tensor, size=(side, side), mode="bilinear", antialias=True, align_corners=False
        )
    out = model.encode_image(tensor.clamp(0.0, 1.0), k=k)
    if out.log_weights is None:
        raise ValueError("predict_topk needs a TopK-Patch model (vision_mode='topk').")
    probs = torch.softmax(out.log_weights[0].float(), dim=-1).cpu().numpy()
    indices = out.indices[0].cpu().numpy()
    scale = image.shape[0] / side
    breast_boxes = model.geometry.boxes(indices) * scale
    half = image.shape[0] / 2.0
    per_view: dict[str, list[tuple[int, float, np.ndarray]]] = {"CC": [], "MLO": []}
    for rank, (box, index) in enumerate(zip(breast_boxes, indices, strict=True), start=1):
        view = _view_of(box, image.shape[0])
        lo, hi = (0.0, half) if view == "CC" else (half, float(image.shape[0]))
        clipped = np.array([box[0], max(box[1], lo), box[2], min(box[3], hi)])
        corners = np.array([[clipped[0], clipped[1]], [clipped[2], clipped[3]]])
        if hasattr(breast, "to_source"):
            corners = np.asarray(breast.to_source(view, corners), dtype=np.float64)
        mapped = np.array(
            [corners[:, 0].min(), corners[:, 1].min(), corners[:, 0].max(), corners[:, 1].max()]
        )
        per_view[view].append((rank, float(probs[index]), mapped))
    boxes = {v: np.array([m for _, _, m in items]).reshape(-1, 4) for v, items in per_view.items()}
    ranks = {v: np.array([r for r, _, _ in items], dtype=np.int64) for v, items in per_view.items()}
    scores = {
        v: np.array([s for _, s, _ in items], dtype=np.float64) for v, items in per_view.items()
    }
    readouts: dict[str, dict[str, float]] = {}
    if zero_shot:
        from medvl_engine.data.mammo_prompts import zero_shot_probabilities

        readouts = zero_shot_probabilities(model, out.embedding)[0]
    grid = model.geometry.grid
    return TopKResult(
        boxes=boxes,
        ranks=ranks,
        scores=scores,
        breast_boxes=breast_boxes,
        breast_scores=probs[indices].astype(np.float64),
        importance=probs.reshape(grid, grid).astype(np.float32),
        cell_bounds=model.geometry.cell_bounds() * scale,
        zero_shot=readouts,
        embedding=out.embedding[0].cpu().numpy(),
    )
