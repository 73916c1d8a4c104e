"""CONCH v1.5's vision tower in plain PyTorch, built from medvl's own code (no timm, no hub code).

Architecture (MahmoodLab/TITAN's ``conch_v1_5``): a ViT-L/16 trunk whose blocks carry
LayerScale, then attentional pooling with one learned query and a LayerNorm:

    image [B, 3, 448, 448] -> 16 px patches [B, 784, W] (W = 1024) -> + <cls> -> + positions
    -> depth x (x + ls1 * attn(norm1(x)); x + ls2 * mlp(norm2(x))) -> norm -> tokens [B, 785, W]
    -> pooled = to_out(attention(query, tokens)) [B, D] (D = 768, 8 heads) -> ln_contrast -> [B, D]

Position embeddings are stored for a 14 x 14 grid (224 px) plus <cls>; other grids get them by
bicubic interpolation, as the original does.

Weights are read as data only, with these state-dict keys (the layout of TITAN's
``conch_v1_5_pytorch_model.bin``)::

    trunk.cls_token [1, 1, W]            trunk.pos_embed [1, G*G + 1, W]
    trunk.patch_embed.proj.{weight [W, 3, P, P], bias [W]}
    trunk.blocks.{i}.norm1 / norm2.{weight, bias} [W]
    trunk.blocks.{i}.attn.qkv.{weight [3W, W], bias [3W]}, attn.proj.{weight [W, W], bias [W]}
    trunk.blocks.{i}.ls1.gamma / ls2.gamma [W]
    trunk.blocks.{i}.mlp.fc1.{weight [R*W, W], bias}, mlp.fc2.{weight [W, R*W], bias}
    trunk.norm.{weight, bias} [W]
    attn_pool_contrast.query [Q, D], attn_pool_contrast.ln_q [D] / ln_k [W] .{weight, bias}
    attn_pool_contrast.to_q.weight [D, D], to_kv.weight [2D, W], to_out.weight [D, D]
    ln_contrast.{weight, bias} [D]

either from a TITAN snapshot (``conch_v1_5_pytorch_model.bin``, unpickled with
``weights_only=True``; the snapshot's own Python files are never imported) or from a medvl
folder: config.json ``{"model_type": "conch-v1.5", "vision_config": {...}}`` (the fields of
:class:`ConchV15Config`) and model.safetensors with the keys above.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CONCH_V15_MODEL_TYPE",
    "ConchV15Config",
    "ConchV15Vision",
    "save_conch_v15_folder",
]

CONCH_V15_MODEL_TYPE = "conch-v1.5"


@dataclass(frozen=True)
class ConchV15Config:
    """Sizes of the CONCH v1.5 vision tower (defaults: the published ViT-L/16 model)."""

    patch_size: int = 16
    width: int = 1024  # trunk width W (TITAN's "context_dim")
    embed_dim: int = 768  # pooled output D
    depth: int = 24
    num_heads: int = 16
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    pooler_queries: int = 1
    pooler_heads: int = 8
    pos_grid: int = 14  # side of the grid the position embeddings are stored for

    @classmethod
    def from_titan(cls, conch_config: dict[str, Any], pos_grid: int) -> ConchV15Config:
        """From the ``conch_config`` section of a TITAN snapshot's config.json."""
        defaults = cls()
        return cls(
            patch_size=int(conch_config.get("patch_size", defaults.patch_size)),
            width=int(conch_config.get("context_dim", defaults.width)),
            embed_dim=int(conch_config.get("embed_dim", defaults.embed_dim)),
            depth=int(conch_config.get("depth", defaults.depth)),
            num_heads=int(conch_config.get("num_heads", defaults.num_heads)),
            mlp_ratio=float(conch_config.get("mlp_ratio", defaults.mlp_ratio)),
            qkv_bias=bool(conch_config.get("qkv_bias", defaults.qkv_bias)),
            pooler_queries=int(
                conch_config.get("pooler_n_queries_contrast", defaults.pooler_queries)
            ),
            pos_grid=pos_grid,
        )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ConchV15Config:
        """From a medvl folder's ``vision_config``; every field must be present."""
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        missing = sorted(set(fields) - set(values))
        if missing:
            raise KeyError(missing[0])
        return cls(**{name: values[name] for name in fields})

    def check(self) -> None:
        """ValueError naming the first size that cannot build the model."""
        for name in ("patch_size", "width", "embed_dim", "depth", "num_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(name)
        for name in ("pooler_queries", "pooler_heads", "pos_grid"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(name)
        if self.width % self.num_heads:
            raise ValueError("num_heads")
        if self.embed_dim % self.pooler_heads:
            raise ValueError("pooler_heads")
        if not (isinstance(self.mlp_ratio, (int, float)) and 0 < self.mlp_ratio <= 64):
            raise ValueError("mlp_ratio")


class _PatchEmbed(nn.Module):
    def __init__(self, patch_size: int, width: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """[B, 3, H, W] -> [B, (H/P)(W/P), width], rows first."""
        result: torch.Tensor = self.proj(images).flatten(2).transpose(1, 2)
        return result


class _SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, qkv_bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=qkv_bias)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, heads, N, head_dim]
        out = F.scaled_dot_product_attention(q, k, v)
        result: torch.Tensor = self.proj(out.transpose(1, 2).reshape(batch, tokens, width))
        return result


class _Mlp(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.fc2(F.gelu(self.fc1(x)))
        return result


class _LayerScale(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((width,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class _Block(nn.Module):
    def __init__(self, config: ConchV15Config) -> None:
        super().__init__()
        width = config.width
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.attn = _SelfAttention(width, config.num_heads, config.qkv_bias)
        self.ls1 = _LayerScale(width)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = _Mlp(width, int(width * config.mlp_ratio))
        self.ls2 = _LayerScale(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        result: torch.Tensor = x + self.ls2(self.mlp(self.norm2(x)))
        return result


class _Trunk(nn.Module):
    """ViT trunk: images [B, 3, H, W] -> normalised tokens [B, 1 + (H/P)(W/P), width]."""

    def __init__(self, config: ConchV15Config) -> None:
        super().__init__()
        self.patch_size = config.patch_size
        self.patch_embed = _PatchEmbed(config.patch_size, config.width)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.width))
        self.pos_embed = nn.Parameter(
            torch.randn(1, config.pos_grid * config.pos_grid + 1, config.width) * 0.02
        )
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.depth))
        self.norm = nn.LayerNorm(config.width, eps=1e-6)

    def positions(self, rows: int, cols: int) -> torch.Tensor:
        """Position embeddings [1, 1 + rows * cols, width] for a rows x cols patch grid.

        The stored G x G table is resized bicubically with the scale factors
        ``((rows + 0.1) / G, (cols + 0.1) / G)``, exactly as the original (DINO's) code does.
        """
        stored = self.pos_embed.shape[1] - 1
        if rows * cols == stored and rows == cols:
            return self.pos_embed
        side = math.isqrt(stored)
        width = self.pos_embed.shape[-1]
        grid = self.pos_embed[:, 1:].reshape(1, side, side, width).permute(0, 3, 1, 2)
        resized = F.interpolate(
            grid,
            scale_factor=((rows + 0.1) / side, (cols + 0.1) / side),
            mode="bicubic",
        )
        resized = resized.permute(0, 2, 3, 1).reshape(1, rows * cols, width)
        return torch.cat([self.pos_embed[:, :1], resized], dim=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        rows, cols = images.shape[-2] // self.patch_size, images.shape[-1] // self.patch_size
        x = self.patch_embed(images)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.positions(rows, cols)
        for block in self.blocks:
            x = block(x)
        result: torch.Tensor = self.norm(x)
        return result


class _AttentionalPooler(nn.Module):
    """Learned queries [Q, D] attend over tokens [B, N, W] -> [B, Q, D] (multi-head)."""

    def __init__(self, embed_dim: int, width: int, heads: int, queries: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Parameter(torch.randn(queries, embed_dim))
        self.ln_k = nn.LayerNorm(width)
        self.ln_q = nn.LayerNorm(embed_dim)
        self.to_q = nn.Linear(embed_dim, embed_dim, bias=False)
        self.to_kv = nn.Linear(width, 2 * embed_dim, bias=False)
        self.to_out = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch = tokens.shape[0]
        q = self.to_q(self.ln_q(self.query)).expand(batch, -1, -1)  # [B, Q, D]
        k, v = self.to_kv(self.ln_k(tokens)).chunk(2, dim=-1)  # each [B, N, D]

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(batch, x.shape[1], self.heads, -1).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(q), split(k), split(v))
        result: torch.Tensor = self.to_out(out.transpose(1, 2).reshape(batch, q.shape[1], -1))
        return result


class ConchV15Vision(nn.Module):
    """CONCH v1.5 vision tower: images [B, 3, H, W] (ImageNet-normalised) -> features [B, D]."""

    def __init__(self, config: ConchV15Config) -> None:
        super().__init__()
        config.check()
        self.config = config
        self.trunk = _Trunk(config)
        self.attn_pool_contrast = _AttentionalPooler(
            config.embed_dim, config.width, config.pooler_heads, config.pooler_queries
        )
        self.ln_contrast = nn.LayerNorm(config.embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        pooled = self.attn_pool_contrast(self.trunk(images))[:, 0]
        result: torch.Tensor = self.ln_contrast(pooled)
        return result


def save_conch_v15_folder(vision: ConchV15Vision, folder: str | Path) -> Path:
    """Save ``vision`` as a medvl "conch-v1.5" folder (config.json + model.safetensors)."""
    from safetensors.torch import save_file

    from medvl_engine.common.atomic import atomic_directory

    config = {
        "model_type": CONCH_V15_MODEL_TYPE,
        "vision_config": dataclasses.asdict(vision.config),
    }
    state = {key: value.detach().cpu().contiguous() for key, value in vision.state_dict().items()}

    def fill(staging: Path) -> None:
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        save_file(state, staging / "model.safetensors")

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return atomic_directory(folder, fill, what="CONCH v1.5 model folder")
