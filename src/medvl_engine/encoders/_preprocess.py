"""CLIP-style image preprocessing in torch: resize, centre crop, rescale, normalise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ImagePreprocess"]

# PIL resample codes used in Hugging Face preprocessor configs -> torch interpolation modes.
_RESAMPLE = {0: "nearest", 1: "bilinear", 2: "bilinear", 3: "bicubic", 4: "bilinear", 5: "bicubic"}


@dataclass(frozen=True)
class ImagePreprocess:
    """What a CLIPImageProcessor does, as tensor operations.

    ``shortest_edge`` resizes so the shorter side has that length (aspect kept),
    then a ``crop_size`` centre crop, ``rescale_factor`` and (x - mean) / std.
    """

    shortest_edge: int = 224
    crop_size: tuple[int, int] = (224, 224)
    mean: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)
    std: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)
    rescale_factor: float = 1 / 255
    interpolation: str = "bicubic"
    do_resize: bool = True
    do_center_crop: bool = True

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ImagePreprocess:
        """Build from a Hugging Face ``preprocessor_config.json`` dict."""
        size = config.get("size", 224)
        if isinstance(size, dict):
            shortest = int(
                size.get("shortest_edge") or min(size.get("height", 224), size.get("width", 224))
            )
        else:
            shortest = int(size)
        crop = config.get("crop_size", shortest)
        if isinstance(crop, dict):
            crop_hw = (int(crop.get("height", shortest)), int(crop.get("width", shortest)))
        else:
            crop_hw = (int(crop), int(crop))
        return cls(
            shortest_edge=int(shortest),
            crop_size=crop_hw,
            mean=_three(config.get("image_mean", cls.mean)),
            std=_three(config.get("image_std", cls.std)),
            rescale_factor=float(config.get("rescale_factor", 1 / 255)),
            interpolation=_RESAMPLE.get(int(config.get("resample", 3)), "bicubic"),
            do_resize=bool(config.get("do_resize", True)),
            do_center_crop=bool(config.get("do_center_crop", True)),
        )

    def __call__(self, patches: torch.Tensor) -> torch.Tensor:
        """uint8 [B, H, W, 3] -> float32 [B, 3, crop_h, crop_w], normalised."""
        images = patches.permute(0, 3, 1, 2).float()
        if self.do_resize:
            height, width = images.shape[-2:]
            new_size = _shortest_edge_size(height, width, self.shortest_edge)
            if new_size != (height, width):
                antialias = self.interpolation in ("bilinear", "bicubic")
                images = F.interpolate(
                    images,
                    size=new_size,
                    mode=self.interpolation,
                    antialias=antialias,
                    **({} if self.interpolation == "nearest" else {"align_corners": False}),
                )
                images = images.clamp(0, 255)
        if self.do_center_crop:
            images = _center_crop(images, self.crop_size)
        images = images * self.rescale_factor
        mean = torch.tensor(self.mean, device=images.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=images.device).view(1, 3, 1, 1)
        return (images - mean) / std


def _three(values: Sequence[float] | float) -> tuple[float, float, float]:
    if isinstance(values, int | float):
        return (float(values),) * 3
    return tuple(float(v) for v in values)  # type: ignore[return-value]


def _shortest_edge_size(height: int, width: int, shortest_edge: int) -> tuple[int, int]:
    """(h, w) with the short side = ``shortest_edge`` and the long side truncated, as HF does."""
    if height <= width:
        return shortest_edge, max(1, int(shortest_edge * width / height))
    return max(1, int(shortest_edge * height / width)), shortest_edge


def _center_crop(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Centre crop [B, C, H, W] to (h, w), zero-padding first when the image is smaller."""
    crop_h, crop_w = size
    height, width = images.shape[-2:]
    pad_h, pad_w = max(0, crop_h - height), max(0, crop_w - width)
    if pad_h or pad_w:
        images = F.pad(images, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
        height, width = images.shape[-2:]
    top = (height - crop_h) // 2
    left = (width - crop_w) // 2
    return images[..., top : top + crop_h, left : left + crop_w]
