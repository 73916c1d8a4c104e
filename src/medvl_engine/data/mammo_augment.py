"""Augmentations of a breast image and its ROI boxes, applied consistently (TopKSigLIP Sec. 4.3).

Random affine (rotation, isotropic scale, translation) per view half (CC rows ``[0, S/2)``, MLO
rows ``[S/2, S)``) so that content never crosses between views; intensity scaling; ROI jitter
(box centre shift and size change). Boxes are ``[M, 4]`` ``(x0, y0, x1, y1)`` breast-image px.
All randomness comes from the ``torch.Generator`` passed in, so a seed fixes the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["MammoAugmentConfig", "affine_half", "augment_breast", "jitter_boxes"]


@dataclass
class MammoAugmentConfig:
    """Ranges of the random transforms (all symmetric around the identity)."""

    rotation_deg: float = 10.0
    scale: float = 0.1  # scale factor in [1 - scale, 1 + scale]
    translate: float = 0.05  # fraction of the half's width / height
    intensity: float = 0.2  # multiply intensities by a factor in [1 - i, 1 + i], then clip
    roi_jitter: float = 0.1  # box centre shift and size change, fraction of the box size
    # Probability that a view half is resampled (rotation, scale, sub-pixel shift); otherwise
    # it only moves by whole pixels, so specks of a pixel or two stay as sharp as in evaluation.
    resample_p: float = 1.0


def _uniform(generator: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def affine_half(
    image: torch.Tensor,
    boxes: torch.Tensor,
    angle_deg: float,
    scale: float,
    shift_xy: tuple[float, float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply ``p_out = c + scale R(angle) (p_in - c) + shift`` to an image ``[C, H, W]`` and boxes.

    c is the image centre, (x, y) px with y down; pixels moving in from outside are 0. Boxes
    ``[M, 4]`` map by their four corners to the axis-aligned bounds, clipped to the image;
    boxes that leave the image entirely are dropped.
    """
    _, h, w = image.shape
    theta = math.radians(angle_deg)
    cos, sin = math.cos(theta), math.sin(theta)
    cx, cy = w / 2.0, h / 2.0
    ys, xs = torch.meshgrid(
        torch.arange(h, dtype=torch.float32) + 0.5,
        torch.arange(w, dtype=torch.float32) + 0.5,
        indexing="ij",
    )
    # Inverse map: p_in = c + R(-angle) (p_out - c - shift) / scale.
    dx, dy = (xs - cx - shift_xy[0]) / scale, (ys - cy - shift_xy[1]) / scale
    x_in = cx + cos * dx + sin * dy
    y_in = cy - sin * dx + cos * dy
    grid = torch.stack([2.0 * x_in / w - 1.0, 2.0 * y_in / h - 1.0], dim=-1)[None]
    warped = F.grid_sample(
        image[None].float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )[0]
    if boxes.numel() == 0:
        return warped.to(image.dtype), boxes.reshape(0, 4)
    x0, y0, x1, y1 = boxes.unbind(-1)
    corners_x = torch.stack([x0, x1, x1, x0], dim=-1) - cx
    corners_y = torch.stack([y0, y0, y1, y1], dim=-1) - cy
    out_x = cx + scale * (cos * corners_x - sin * corners_y) + shift_xy[0]
    out_y = cy + scale * (sin * corners_x + cos * corners_y) + shift_xy[1]
    mapped = torch.stack(
        [out_x.min(-1).values, out_y.min(-1).values, out_x.max(-1).values, out_y.max(-1).values], -1
    )
    mapped[:, 0::2] = mapped[:, 0::2].clamp(0, w)
    mapped[:, 1::2] = mapped[:, 1::2].clamp(0, h)
    keep = (mapped[:, 2] > mapped[:, 0]) & (mapped[:, 3] > mapped[:, 1])
    return warped.to(image.dtype), mapped[keep]


def jitter_boxes(boxes: torch.Tensor, amount: float, generator: torch.Generator) -> torch.Tensor:
    """Shift box centres by up to ``amount`` of the box size; scale sides by ``1 +- amount``."""
    if boxes.numel() == 0 or amount <= 0:
        return boxes
    size = boxes[:, 2:] - boxes[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2.0
    centre = centre + (torch.rand(size.shape, generator=generator) * 2 - 1) * amount * size
    size = size * (1.0 + (torch.rand(size.shape, generator=generator) * 2 - 1) * amount)
    return torch.cat([centre - size / 2.0, centre + size / 2.0], dim=-1)


def augment_breast(
    image: torch.Tensor, boxes: torch.Tensor, config: MammoAugmentConfig, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Augment a breast image ``[1, S, S]`` in [0, 1] and its boxes ``[M, 4]`` breast px.

    Each view half gets its own affine; a box belongs to the half holding its centre. With
    ``config.resample_p < 1`` a half keeps its pixels' values (whole-pixel shift only) with
    probability ``1 - resample_p``; at 1 no extra number is drawn, so results are unchanged.
    """
    size = image.shape[-1]
    half = size // 2
    halves, new_boxes = [], []
    centres_y = (boxes[:, 1] + boxes[:, 3]) / 2.0 if boxes.numel() else boxes.new_zeros(0)
    for top in (0, half):
        part = image[:, top : top + half]
        mine = (
            boxes[(centres_y >= top) & (centres_y < top + half)]
            if boxes.numel()
            else boxes.reshape(0, 4)
        )
        local = mine.clone()
        local[:, 1::2] -= top
        angle = _uniform(generator, -config.rotation_deg, config.rotation_deg)
        scale = _uniform(generator, 1.0 - config.scale, 1.0 + config.scale)
        shift = (
            _uniform(generator, -config.translate, config.translate) * part.shape[-1],
            _uniform(generator, -config.translate, config.translate) * part.shape[-2],
        )
        if config.resample_p < 1.0 and _uniform(generator, 0.0, 1.0) >= config.resample_p:
            angle, scale, shift = 0.0, 1.0, (float(round(shift[0])), float(round(shift[1])))
        warped, moved = affine_half(part, local, angle, scale, shift)
        moved = moved.clone()
        moved[:, 1::2] += top
        halves.append(warped)
        new_boxes.append(moved)
    factor = _uniform(generator, 1.0 - config.intensity, 1.0 + config.intensity)
    out = (torch.cat(halves, dim=1) * factor).clamp(0.0, 1.0)
    boxes_out = jitter_boxes(torch.cat(new_boxes), config.roi_jitter, generator)
    return out, boxes_out
