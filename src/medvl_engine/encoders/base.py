"""The interface every patch vision-language encoder exposes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["PatchTextEncoder"]


class PatchTextEncoder(ABC):
    """A patch image encoder and a text encoder sharing one embedding space.

    Attributes:
        name: registry name or folder the model was loaded from.
        embed_dim: D, the size of the joint embedding space.
        patch_size: side in pixels of the patches the model expects, at ``target_mpp``.
        target_mpp: micrometres per pixel the patches should be read at.
        device: torch device the model runs on.
    """

    name: str
    embed_dim: int
    patch_size: int
    target_mpp: float
    device: torch.device

    @abstractmethod
    def _embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        """uint8 [B, H, W, 3] on ``self.device`` -> unnormalised float [B, D]."""

    @abstractmethod
    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        """T texts -> unnormalised float [T, D]."""

    @torch.inference_mode()
    def encode_patches(
        self, patches: np.ndarray | torch.Tensor, normalize: bool = True
    ) -> torch.Tensor:
        """Embed RGB patches: uint8 [B, H, W, 3] -> float32 [B, D] (L2-normalised)."""
        tensor = torch.as_tensor(patches)
        if tensor.ndim != 4 or tensor.shape[-1] != 3:
            raise ValueError(f"patches must be uint8 [B, H, W, 3], got shape {tuple(tensor.shape)}")
        if tensor.dtype != torch.uint8:
            raise ValueError(f"patches must be uint8 [B, H, W, 3], got dtype {tensor.dtype}")
        embeddings = self._embed_patches(tensor.to(self.device)).float()
        if normalize:
            embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
        return embeddings.cpu()

    @torch.inference_mode()
    def encode_text(self, texts: Sequence[str], normalize: bool = True) -> torch.Tensor:
        """Embed prompts: T strings -> float32 [T, D] on the CPU (L2-normalised if asked)."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not texts:
            return torch.empty(0, self.embed_dim)
        embeddings = self._embed_text(texts).float()
        if normalize:
            embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
        return embeddings.cpu()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, embed_dim={self.embed_dim}, "
            f"patch_size={self.patch_size}, target_mpp={self.target_mpp})"
        )
