"""ROI-supervised patch pretraining of the TopKSigLIP vision backbone.

The paper starts its ConvNeXt from ImageNet weights. Where none can be loaded (offline, or a
small demo tower), this stage gives the backbone lesion-sensitive features before the
Sup-sigmoid training: patches of the breast image centred on ROI boxes (lesions) and patches
of breasts without findings (normal tissue) are classified by the backbone and a linear head
with binary cross entropy,

    L = -mean_i [ y_i log sigmoid(h(f(x_i))) + (1 - y_i) log(1 - sigmoid(h(f(x_i)))) ]

with x_i ``[1, P, P]`` patches at the candidate size P of the TopK grid, f the pooled backbone
features ``[C_last]`` and h the linear head (discarded afterwards). It uses only the ROI boxes
the Soft Dice loss already uses, never the report or the finding labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from medvl_engine.data.mammo_dataset import MammoDataset
from medvl_engine.errors import DataError
from medvl_engine.models import _convnext

if TYPE_CHECKING:
    from transformers import ConvNextModel

__all__ = ["LesionPatches", "lesion_patches", "pretrain_on_lesion_patches"]

_TISSUE_LEVEL = 0.05
_TISSUE_FRACTION = 0.8


@dataclass
class LesionPatches:
    """patches ``[M, 1, P, P]`` float32 in [0, 1]; labels ``[M]`` (1 = centred on an ROI box)."""

    patches: torch.Tensor
    labels: torch.Tensor


def _crop(image: np.ndarray, x0: int, y0: int, size: int) -> np.ndarray:
    return image[y0 : y0 + size, x0 : x0 + size]


def lesion_patches(
    dataset: MammoDataset,
    patch_size: int,
    normals_per_breast: int = 2,
    jitter: float = 0.2,
    seed: int = 0,
) -> LesionPatches:
    """Lesion and normal-tissue patches from the (unaugmented) breasts of ``dataset``.

    One patch per ROI box, centred on it up to ``jitter * patch_size`` px; and
    ``normals_per_breast`` patches of mostly tissue from each breast without findings or ROIs.
    """
    rng = np.random.default_rng(seed)
    shift = int(round(jitter * patch_size))
    patches: list[np.ndarray] = []
    labels: list[float] = []
    for index in range(len(dataset)):
        record = dataset.records[index]
        image, boxes = dataset.breast(index)
        side = image.shape[0]
        if side < patch_size:
            raise DataError(f"breast images of {side} px cannot hold {patch_size} px patches.")
        limit = side - patch_size
        if len(boxes):
            for x0, y0, x1, y1 in boxes:
                cx = (x0 + x1) / 2 + rng.integers(-shift, shift + 1)
                cy = (y0 + y1) / 2 + rng.integers(-shift, shift + 1)
                left = int(np.clip(round(cx - patch_size / 2), 0, limit))
                top = int(np.clip(round(cy - patch_size / 2), 0, limit))
                patches.append(_crop(image, left, top, patch_size))
                labels.append(1.0)
        elif not record.findings:
            for _ in range(normals_per_breast):
                for _attempt in range(50):
                    left, top = (int(v) for v in rng.integers(0, limit + 1, 2))
                    patch = _crop(image, left, top, patch_size)
                    if (patch > _TISSUE_LEVEL).mean() >= _TISSUE_FRACTION:
                        break
                patches.append(patch)
                labels.append(0.0)
    if not patches or len(set(labels)) < 2:
        raise DataError(
            "lesion pretraining needs breasts with ROI boxes and breasts without findings; "
            "set task.lesion_pretrain_steps=0 for this cohort."
        )
    stacked = torch.from_numpy(np.stack(patches).astype(np.float32))[:, None]
    return LesionPatches(stacked, torch.tensor(labels, dtype=torch.float32))


def pretrain_on_lesion_patches(
    backbone: ConvNextModel,
    data: LesionPatches,
    steps: int,
    lr: float = 1e-3,
    batch_size: int = 32,
    weight_decay: float = 0.05,
    seed: int = 0,
) -> list[float]:
    """Train ``backbone`` (a transformers ConvNextModel) and a throwaway linear head, in place.

    Each step draws ``batch_size`` patches (random horizontal flips) and takes one AdamW step
    on the BCE above. Returns the loss of every step.
    """
    generator = torch.Generator().manual_seed(seed)
    device = next(backbone.parameters()).device
    width = list(backbone.config.hidden_sizes or [])[-1]
    head = nn.Linear(width, 1).to(device)
    parameters = [p for p in backbone.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)
    was_training = backbone.training
    backbone.train()
    losses: list[float] = []
    for _ in range(steps):
        chosen = torch.randint(0, len(data.labels), (batch_size,), generator=generator)
        patches = data.patches[chosen]
        flips = torch.rand(batch_size, generator=generator) < 0.5
        patches = torch.where(flips.view(-1, 1, 1, 1), patches.flip(-1), patches).to(device)
        pooled = _convnext.pooled_features(backbone, _convnext.grayscale_to_input(patches))
        loss = F.binary_cross_entropy_with_logits(
            head(pooled).squeeze(-1), data.labels[chosen].to(device)
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError("lesion pretraining diverged (non-finite loss); lower its lr.")
        losses.append(value)
    backbone.train(was_training)
    return losses
