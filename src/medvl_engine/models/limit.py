"""LIMIT (Locked Image Multiple Instance preTraining): report-guided pooling and the model.

The vision side is frozen and enters only as precomputed patch features ``v_i``; a
trainable text tower embeds reports and prompts ``r``. A report queries the bag of
patches (Eq. 1-2)::

    alpha_i(r) = exp(v_i . r / tau_attn) / sum_k exp(v_k . r / tau_attn)
    h_W(r)     = sum_i alpha_i(r) v_i

Training scores every slide of a bag against every report, ``S[i, j] = cos(h_{W_i}(r_j),
r_j)`` (the input of :func:`medvl_engine.losses.weighted_infonce`, Eq. 3-4);
zero-shot classification is ``y = argmax_k cos(h_W(c_k), c_k)`` (Eq. 5).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from medvl_engine.encoders import TextTower

__all__ = [
    "POOLING_METHODS",
    "report_guided_pool",
    "pool_patches",
    "LimitModel",
    "bag_similarity",
    "save_limit_text_tower",
    "load_limit_model",
]

POOLING_METHODS = ("report_guided", "mean", "random", "topk")
PoolingMethod = Literal["report_guided", "mean", "random", "topk"]


@overload
def report_guided_pool(
    patch_features: torch.Tensor,
    queries: torch.Tensor,
    tau_attn: float,
    mask: torch.Tensor | None = None,
    return_attention: Literal[False] = False,
) -> torch.Tensor: ...


@overload
def report_guided_pool(
    patch_features: torch.Tensor,
    queries: torch.Tensor,
    tau_attn: float,
    mask: torch.Tensor | None = None,
    *,
    return_attention: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...


def report_guided_pool(
    patch_features: torch.Tensor,
    queries: torch.Tensor,
    tau_attn: float,
    mask: torch.Tensor | None = None,
    return_attention: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Report-conditioned attention pooling of a bag of patches (LIMIT Eq. 1-2).

    ``alpha_i = softmax_i(v_i . r / tau_attn)``, ``h = sum_i alpha_i v_i``, one ``h`` per query.

    patch_features: ``[..., M, D]`` (used as given: normalise before calling if wanted).
    queries: ``[..., Q, D]``; leading dims broadcast against those of patch_features.
    mask: ``[..., M]`` bool, True = real patch; padded patches get exactly zero weight.
    A bag with no real patch pools to the zero vector.
    Returns ``[..., Q, D]`` (and the attention ``[..., Q, M]`` if ``return_attention``).
    """
    if tau_attn <= 0:
        raise ValueError(f"tau_attn must be positive, got {tau_attn}")
    logits = torch.matmul(queries, patch_features.transpose(-1, -2)).float() / tau_attn
    if mask is not None:
        valid = mask.unsqueeze(-2).to(torch.bool)  # [..., 1, M]
        logits = logits.masked_fill(~valid, float("-inf"))
        attention = torch.softmax(logits, dim=-1)
        attention = attention.masked_fill(~valid, 0.0)  # rows that were all padding: NaN -> 0
    else:
        attention = torch.softmax(logits, dim=-1)
    pooled = torch.matmul(attention.to(patch_features.dtype), patch_features)
    return (pooled, attention) if return_attention else pooled


def pool_patches(
    patch_features: torch.Tensor,
    queries: torch.Tensor,
    method: PoolingMethod = "report_guided",
    tau_attn: float = 0.05,
    mask: torch.Tensor | None = None,
    k: int = 10,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Slide representation per query with one of the inference pooling methods (Table 4).

    - ``report_guided``: :func:`report_guided_pool` (Eq. 1-2).
    - ``mean``: the mean of the real patches, the same for every query.
    - ``random``: weights drawn uniformly at random over the real patches and normalised
      to sum to 1 (content-blind weighting), the same for every query.
    - ``topk``: the mean of the ``k`` real patches with the highest ``v . r`` per query
      (all of them when the bag is smaller).

    patch_features ``[..., M, D]``, queries ``[..., Q, D]``, mask ``[..., M]`` -> ``[..., Q, D]``.
    """
    if method == "report_guided":
        return report_guided_pool(patch_features, queries, tau_attn, mask)
    count_m = patch_features.shape[-2]
    valid = (
        torch.ones(patch_features.shape[:-1], dtype=torch.bool, device=patch_features.device)
        if mask is None
        else mask.to(torch.bool)
    )
    out_shape = torch.broadcast_shapes(queries.shape[:-1], patch_features.shape[:-2] + (1,))
    out_shape = out_shape + (patch_features.shape[-1],)
    if method in ("mean", "random"):
        if method == "mean":
            weights = valid.to(patch_features.dtype)
        else:
            weights = torch.rand(valid.shape, generator=generator, device=patch_features.device).to(
                patch_features.dtype
            )
            weights = weights * valid
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-12)
        pooled = torch.matmul(weights.unsqueeze(-2), patch_features)  # [..., 1, D]
        return pooled.expand(out_shape)
    if method == "topk":
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        scores = torch.matmul(queries, patch_features.transpose(-1, -2))  # [..., Q, M]
        scores = scores.masked_fill(~valid.unsqueeze(-2), float("-inf"))
        top = min(k, count_m)
        values, indices = scores.topk(top, dim=-1)
        chosen = torch.zeros_like(scores).scatter(-1, indices, torch.isfinite(values).to(scores))
        chosen = chosen / chosen.sum(-1, keepdim=True).clamp_min(1.0)
        return torch.matmul(chosen.to(patch_features.dtype), patch_features)
    raise ValueError(f"pooling method must be one of {POOLING_METHODS}, got {method!r}")


def bag_similarity(
    patch_features: torch.Tensor,
    report_embeddings: torch.Tensor,
    tau_attn: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``S[i, j] = cos(h_{W_i}(r_j), r_j)`` for a bag of K slides and their K reports.

    patch_features: ``[K, M, D]`` (padded), report_embeddings: ``[K, D]``, mask ``[K, M]``.
    Returns ``[K, K]``: row i is slide i, column j is report j (the positive is the diagonal).
    """
    queries = report_embeddings.unsqueeze(0).expand(patch_features.shape[0], -1, -1)
    pooled = report_guided_pool(patch_features, queries, tau_attn, mask)  # [K, K, D]
    return F.cosine_similarity(pooled.float(), report_embeddings.float().unsqueeze(0), dim=-1)


class LimitModel(nn.Module):
    """Trainable text tower over frozen patch features.

    text_tower: a :class:`medvl_engine.encoders.TextTower` (transformers backbone + pooling +
    optional projection to the vision dim ``D``); its output is L2-normalised here.
    tau_attn: attention temperature of Eq. 1. normalize_features: L2-normalise patch
    features before pooling (so ``v . r`` is a cosine in [-1, 1]).
    The SigLIT ablation's learnable ``logit_scale`` (log of 1/tau, init log 10) and
    ``logit_bias`` (init -10) live here; they are unused by the InfoNCE losses.
    """

    def __init__(
        self,
        text_tower: TextTower,
        tau_attn: float = 0.05,
        normalize_features: bool = True,
        vision_encoder: str = "",
    ) -> None:
        super().__init__()
        if tau_attn <= 0:
            raise ValueError(f"tau_attn must be positive, got {tau_attn}")
        self.text_tower = text_tower
        self.tau_attn = float(tau_attn)
        self.normalize_features = normalize_features
        self.vision_encoder = vision_encoder
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.logit_bias = nn.Parameter(torch.tensor(-10.0))

    @property
    def embed_dim(self) -> int:
        return int(self.text_tower.output_dim)

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids ``[T, L]`` -> unit text embeddings ``[T, D]``."""
        return F.normalize(self.text_tower(input_ids, attention_mask).float(), dim=-1)

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """T strings -> unit text embeddings ``[T, D]`` (tokenised with the tower's tokenizer)."""
        device = next(self.text_tower.parameters()).device
        tokens = self.text_tower.tokenize(list(texts), device)
        return self.encode_tokens(tokens["input_ids"], tokens["attention_mask"])

    def prepare_features(self, patch_features: torch.Tensor) -> torch.Tensor:
        """Frozen patch features ``[..., M, D]`` as the model pools them (float, unit if asked)."""
        with torch.no_grad():
            features = patch_features.float()
            return F.normalize(features, dim=-1) if self.normalize_features else features

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A bag of K slides with their K reports -> (similarity ``[K, K]``, reports ``[K, D]``).

        features ``[K, M, D]`` padded, mask ``[K, M]`` (True = real patch), input_ids and
        attention_mask ``[K, L]`` (report j belongs to slide j).
        """
        reports = self.encode_tokens(input_ids, attention_mask)
        similarity = bag_similarity(self.prepare_features(features), reports, self.tau_attn, mask)
        return similarity, reports

    @torch.no_grad()
    def slide_scores(
        self,
        features: torch.Tensor,
        text_embeddings: torch.Tensor,
        mask: torch.Tensor | None = None,
        pooling: PoolingMethod = "report_guided",
        k: int = 10,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Zero-shot scores ``cos(h_W(c_k), c_k)`` of slides against C class prompts (Eq. 5).

        features ``[M, D]`` or ``[B, M, D]``, text_embeddings ``[C, D]``, mask ``[M]`` or
        ``[B, M]``. Returns ``[C]`` or ``[B, C]``; the prediction is the argmax.
        """
        single = features.ndim == 2
        if single:
            features = features.unsqueeze(0)
            mask = mask.unsqueeze(0) if mask is not None else None
        prepared = self.prepare_features(features)
        classes = F.normalize(text_embeddings.float(), dim=-1).to(prepared.device)
        queries = classes.unsqueeze(0).expand(prepared.shape[0], -1, -1)
        pooled = pool_patches(prepared, queries, pooling, self.tau_attn, mask, k, generator)
        scores = F.cosine_similarity(pooled, classes.unsqueeze(0), dim=-1)
        return scores[0] if single else scores


def save_limit_text_tower(model: LimitModel, folder: str | Path) -> Path:
    """Save the tuned text tower as a model folder the encoder registry loads.

    The folder is a "medvl-text-tower" folder (:func:`medvl_engine.encoders.save_text_tower_folder`:
    config.json + model.safetensors + tokenizer files) paired with ``model.vision_encoder``;
    config.json also records ``tau_attn``, ``normalize_features`` and ``"trained_with":
    "limit"``. Written into a temporary sibling folder and renamed into place.
    """
    from medvl_engine import atomic_directory
    from medvl_engine.encoders import save_text_tower_folder

    def fill(staging: Path) -> None:
        save_text_tower_folder(staging, model.text_tower, model.vision_encoder or "")
        config_path = staging / "config.json"
        config = json.loads(config_path.read_text())
        config.update(
            {
                "trained_with": "limit",
                "tau_attn": model.tau_attn,
                "normalize_features": model.normalize_features,
            }
        )
        config_path.write_text(json.dumps(config, indent=2))

    return atomic_directory(folder, fill, what="LIMIT model folder")


def load_limit_model(folder: str | Path, device: str | torch.device = "cpu") -> LimitModel:
    """Rebuild a :class:`LimitModel` from a folder written by :func:`save_limit_text_tower`.

    Works for any "medvl-text-tower" or "medvl-demo" folder (its text side); the vision
    encoder is not loaded (LIMIT works on precomputed features).
    """
    from medvl_engine.encoders import load_text_tower
    from medvl_engine.encoders.folder_checks import check_model_folder, load_weights
    from medvl_engine.errors import ModelNotFoundError

    folder = Path(folder)
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise ModelNotFoundError(
            f"{folder} is not a text-tower model folder (config.json and model.safetensors are "
            "needed); give the folder written by medvl-train.",
            folder,
        )
    if _is_referenced_demo(folder):  # the shipped demo: MiniLM by name plus its projection
        from medvl_engine.encoders.demo import load_demo_folder

        demo = load_demo_folder(folder, json.loads((folder / "config.json").read_text()), name="")
        return LimitModel(demo.text_tower, 0.05, True, "medvl-demo").to(device)
    config = check_model_folder(folder, needs_tokenizer=True)
    if "text_config" not in config:
        raise ModelNotFoundError(
            f"model folder {folder} has no text tower description (text_config) in config.json; "
            "give a medvl-text-tower or medvl-demo folder.",
            folder,
        )
    tower = load_text_tower(folder, config, load_weights(folder))
    vision = config.get("vision_encoder") or (
        config.get("model_type") if config.get("model_type") == "medvl-demo" else ""
    )
    tau_attn = config.get("tau_attn", 0.05)
    if isinstance(tau_attn, bool) or not isinstance(tau_attn, (int, float)) or not tau_attn > 0:
        raise ModelNotFoundError(
            f'{folder / "config.json"} gives "tau_attn" as {tau_attn!r}, not a positive number; '
            "restore the model folder.",
            folder / "config.json",
        )
    model = LimitModel(
        tower,
        tau_attn=float(tau_attn),
        normalize_features=bool(config.get("normalize_features", True)),
        vision_encoder=str(vision),
    )
    return model.to(device)


def _is_referenced_demo(folder: Path) -> bool:
    """A "medvl-demo" folder whose text tower is the installed MiniLM (no text_config)."""
    from medvl_engine.encoders.folder_checks import read_config

    config = read_config(folder)
    return config.get("model_type") == "medvl-demo" and "text_config" not in config
