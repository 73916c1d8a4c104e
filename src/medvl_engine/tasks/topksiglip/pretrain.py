"""ROI-supervised patch pretraining of the TopKSigLIP vision backbone.

The paper starts its ConvNeXt from ImageNet weights. Where none can be loaded (offline, or a
small demo tower), this stage gives the backbone lesion-sensitive features before the
Sup-sigmoid training: patches of the breast image centred on ROI boxes (lesions) and patches
of breasts without findings (normal tissue) are classified by the backbone and a linear head
with binary cross entropy,

    L = -mean_i [ y_i log sigmoid(h(f(x_i))) + (1 - y_i) log(1 - sigmoid(h(f(x_i)))) ]

with x_i ``[1, P, P]`` patches at the candidate size P of the TopK grid, f the pooled backbone
features ``[C_last]`` and h the linear head (discarded afterwards). It uses the ROI boxes the
Soft Dice loss already uses, never the report or the finding labels.

With ``malignancy_weight`` lambda > 0 a second output h_m of the head also tells the ROI patches
of breasts with cancer from those of breasts without (the breast-level cancer outcome, a
training label the tabular target already holds). A breast-level outcome does not say which of
two findings is the cancer: by default every ROI of a cancer breast counts as malignant; with
``sole_finding_outcome`` only the ROIs of breasts with one kind of finding carry the outcome,
and those of breasts with several kinds are left out of this term (a benign calcification
beside a malignant mass would otherwise be taught as malignant):

    L = L_lesion + lambda * BCE over ROI patches with a known outcome (h_m(f(x_i)), c_i)

With ``malignancy_on_normals`` the normal patches (all from breasts without findings, so
without cancer) join that term as benign: the bright-spot hard negatives (calcified vessels,
coarse benign calcifications) are then taught as not malignant, not only as not lesions.

:func:`pretrain_scorer_on_roi_cells` then trains the patch scorer (the backbone's first stages
and the 1x1 scorer head, on whole breast images) so that the candidate softmax puts its mass on
the ROI cells (:func:`~medvl_engine.losses.roi_pointing_loss`); without it the zero-initialised
head starts the Sup-sigmoid training picking patches at random.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from medvl_engine.data.mammo_dataset import MammoDataset, collate_breasts
from medvl_engine.errors import DataError
from medvl_engine.losses import roi_pointing_loss
from medvl_engine.models import convnext as _convnext
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig

if TYPE_CHECKING:
    from transformers import ConvNextModel

    from medvl_engine.data.mammo_manifest import MammoRecord
    from medvl_engine.models.topksiglip import TopKSigLIP

__all__ = [
    "LesionPatches",
    "lesion_patches",
    "malignancy_rated",
    "pretrain_backbone",
    "pretrain_on_lesion_patches",
    "pretrain_scorer",
    "pretrain_scorer_on_roi_cells",
]

_TISSUE_LEVEL = 0.05
_TISSUE_FRACTION = 0.8


@dataclass
class LesionPatches:
    """patches ``[M, 1, P, P]`` float32 in [0, 1]; labels ``[M]`` (1 = centred on an ROI box);
    cancer ``[M]`` (1 / 0 = the breast has / has not cancer, NaN = unknown; normal patches come
    from breasts without findings, so they hold 0)."""

    patches: torch.Tensor
    labels: torch.Tensor
    cancer: torch.Tensor | None = None


def _crop(image: np.ndarray, x0: int, y0: int, size: int) -> np.ndarray:
    return image[y0 : y0 + size, x0 : x0 + size]


def _brightest_spots(image: np.ndarray, count: int, apart: int) -> list[tuple[int, int]]:
    """(row, col) of the ``count`` brightest points of ``image`` smoothed over 3 x 3 px, each
    at least ``apart`` px (Chebyshev) from the ones before."""
    padded = np.pad(image, 1, mode="edge")
    smooth = np.zeros(image.shape, dtype=image.dtype)
    for dy in range(3):
        for dx in range(3):
            smooth += padded[dy : dy + image.shape[0], dx : dx + image.shape[1]]
    spots: list[tuple[int, int]] = []
    for _ in range(count):
        row, col = (int(v) for v in np.unravel_index(int(np.argmax(smooth)), smooth.shape))
        spots.append((row, col))
        smooth[
            max(row - apart, 0) : row + apart + 1, max(col - apart, 0) : col + apart + 1
        ] = -np.inf
    return spots


def _roi_outcome(record: MammoRecord, sole_finding_outcome: bool) -> float:
    """The cancer outcome an ROI patch of ``record`` is rated with (NaN: not rated)."""
    if record.cancer is None:
        return float("nan")
    if sole_finding_outcome and len(set(record.findings or [])) != 1:
        return float("nan")
    return float(record.cancer)


def lesion_patches(
    dataset: MammoDataset,
    patch_size: int,
    normals_per_breast: int = 2,
    jitter: float = 0.2,
    seed: int = 0,
    bright_normals_per_breast: int = 0,
    sole_finding_outcome: bool = False,
    crops_per_roi: int = 1,
) -> LesionPatches:
    """Lesion and normal-tissue patches from the (unaugmented) breasts of ``dataset``.

    ``crops_per_roi`` patches per ROI box, each centred on it up to ``jitter * patch_size`` px
    (drawn independently: the lesion at a different place in each); and
    ``normals_per_breast`` patches of mostly tissue from each breast without findings or ROIs,
    plus ``bright_normals_per_breast`` patches centred on its brightest spots (hard negatives:
    calcified vessels, coarse benign calcifications, skin markers and dense islands are bright
    but are not findings). With ``sole_finding_outcome`` an ROI patch carries its breast's
    cancer outcome only when the breast's findings are of one kind (NaN, not rated, otherwise).
    """
    if crops_per_roi < 1:
        raise DataError(f"crops per ROI box must be 1 or more, got {crops_per_roi}.")
    rng = np.random.default_rng(seed)
    shift = int(round(jitter * patch_size))
    patches: list[np.ndarray] = []
    labels: list[float] = []
    cancer: list[float] = []
    for index in range(len(dataset)):
        record = dataset.records[index]
        image, boxes = dataset.breast(index)
        side = image.shape[0]
        if side < patch_size:
            raise DataError(f"breast images of {side} px cannot hold {patch_size} px patches.")
        limit = side - patch_size
        if len(boxes):
            for (x0, y0, x1, y1), _ in itertools.product(boxes, range(crops_per_roi)):
                cx = (x0 + x1) / 2 + rng.integers(-shift, shift + 1)
                cy = (y0 + y1) / 2 + rng.integers(-shift, shift + 1)
                left = int(np.clip(round(cx - patch_size / 2), 0, limit))
                top = int(np.clip(round(cy - patch_size / 2), 0, limit))
                patches.append(_crop(image, left, top, patch_size))
                labels.append(1.0)
                cancer.append(_roi_outcome(record, sole_finding_outcome))
        elif not record.findings:
            for _ in range(normals_per_breast):
                for _attempt in range(50):
                    left, top = (int(v) for v in rng.integers(0, limit + 1, 2))
                    patch = _crop(image, left, top, patch_size)
                    if (patch > _TISSUE_LEVEL).mean() >= _TISSUE_FRACTION:
                        break
                patches.append(patch)
                labels.append(0.0)
                cancer.append(0.0)
            for row, col in _brightest_spots(image, bright_normals_per_breast, patch_size // 2):
                left = int(np.clip(col - patch_size // 2, 0, limit))
                top = int(np.clip(row - patch_size // 2, 0, limit))
                patches.append(_crop(image, left, top, patch_size))
                labels.append(0.0)
                cancer.append(0.0)
    if not patches or len(set(labels)) < 2:
        raise DataError(
            "lesion pretraining needs breasts with ROI boxes and breasts without findings; "
            "set task.lesion_pretrain_steps=0 for this cohort."
        )
    stacked = torch.from_numpy(np.stack(patches).astype(np.float32))[:, None]
    return LesionPatches(
        stacked,
        torch.tensor(labels, dtype=torch.float32),
        torch.tensor(cancer, dtype=torch.float32),
    )


def pretrain_on_lesion_patches(
    backbone: ConvNextModel,
    data: LesionPatches,
    steps: int,
    lr: float = 1e-3,
    batch_size: int = 32,
    weight_decay: float = 0.05,
    seed: int = 0,
    malignancy_weight: float = 0.0,
    malignancy_on_normals: bool = False,
    backbone_input: _convnext.BackboneInput = "gray",
) -> list[float]:
    """Train ``backbone`` (a transformers ConvNextModel) and a throwaway linear head, in place.

    Each step draws ``batch_size`` patches (random horizontal flips) and takes one AdamW step
    on the loss above (lambda = ``malignancy_weight``; 0 = lesion vs normal alone; with
    ``malignancy_on_normals`` the malignancy term also rates the normal patches). Returns the
    loss of every step. ``backbone_input`` is the model's ``vision_input``.
    """
    if malignancy_weight > 0 and not _has_both_outcomes(data, malignancy_on_normals):
        raise DataError(
            "the malignancy term of lesion pretraining needs patches of breasts with and "
            "without cancer; set task.lesion_pretrain_malignancy=0 for this cohort."
        )
    generator = torch.Generator().manual_seed(seed)
    device = next(backbone.parameters()).device
    width = list(backbone.config.hidden_sizes or [])[-1]
    head = nn.Linear(width, 2).to(device)
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
        pooled = _convnext.pooled_features(
            backbone, _convnext.backbone_input(patches, backbone_input)
        )
        logits = head(pooled)
        loss = F.binary_cross_entropy_with_logits(logits[:, 0], data.labels[chosen].to(device))
        if malignancy_weight > 0 and data.cancer is not None:
            outcome = data.cancer[chosen].to(device)
            rated = malignancy_rated(data.labels[chosen].to(device), outcome, malignancy_on_normals)
            if bool(rated.any()):
                loss = loss + malignancy_weight * F.binary_cross_entropy_with_logits(
                    logits[rated, 1], outcome[rated]
                )
        losses.append(_optimizer_step(optimizer, loss, "lesion pretraining"))
    backbone.train(was_training)
    return losses


def _optimizer_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, stage: str) -> float:
    """One step on ``loss``; its value, or one sentence when it is not finite."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(f"{stage} diverged (non-finite loss); lower its lr.")
    return value


def malignancy_rated(
    labels: torch.Tensor, cancer: torch.Tensor, on_normals: bool = False
) -> torch.Tensor:
    """The patches ``[M]`` (bool) the malignancy term rates: those with a known outcome
    (``cancer [M]`` not NaN) that are ROI patches (``labels [M]`` 1), or any with ``on_normals``."""
    rated = ~torch.isnan(cancer)
    return rated if on_normals else rated & (labels > 0)


def _has_both_outcomes(data: LesionPatches, on_normals: bool) -> bool:
    """True when the patches the malignancy term rates hold breasts with and without cancer."""
    if data.cancer is None:
        return False
    outcome = data.cancer[malignancy_rated(data.labels, data.cancer, on_normals)]
    return bool((outcome == 1).any() and (outcome == 0).any())


def pretrain_scorer_on_roi_cells(
    model: TopKSigLIP,
    dataset: MammoDataset,
    steps: int,
    lr: float = 1e-3,
    backbone_lr_scale: float = 1.0,
    batch_size: int = 8,
    weight_decay: float = 0.05,
    seed: int = 0,
) -> list[float]:
    """Train the scorer of ``model`` (``importance_logits``: backbone stages 1-3 at
    ``lr * backbone_lr_scale``, scorer head at ``lr``), in place, on the breasts of ``dataset``
    that have ROI boxes.

    Each step draws ``batch_size`` such breasts (augmented as in training when the dataset
    augments: step t reads them as epoch t), scores the G x G candidates ``s [B, N]`` and takes
    one AdamW step on ``roi_pointing_loss(s, roi_mask [B, N])``. Returns the loss of every step.
    """
    with_roi = [i for i in range(len(dataset)) if dataset.records[i].has_roi]
    if not with_roi:
        raise DataError(
            "scorer pretraining needs breasts with ROI boxes; set "
            "task.scorer_pretrain_steps=0 for this cohort."
        )
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    backbone = [p for p in model.backbone.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        [
            {"params": list(model.scorer_head.parameters()), "lr": lr},
            {"params": backbone, "lr": lr * backbone_lr_scale},
        ],
        weight_decay=weight_decay,
    )
    was_training = model.training
    model.train()
    losses: list[float] = []
    for step in range(steps):
        chosen = torch.randint(0, len(with_roi), (batch_size,), generator=generator).tolist()
        samples = [dataset.sample(with_roi[i], epoch=step) for i in chosen]
        samples = [sample for sample in samples if sample.has_roi]  # an ROI cropped away
        if not samples:
            continue
        batch = collate_breasts(samples)
        logits = model.importance_logits(batch["images"].to(device))
        target = batch["roi_mask"].to(device).flatten(1)
        loss = roi_pointing_loss(logits, target)
        losses.append(_optimizer_step(optimizer, loss, "scorer pretraining"))
    model.train(was_training)
    return losses


def pretrain_backbone(
    model: TopKSigLIP,
    dataset: MammoDataset,
    config: TopKSigLIPTaskConfig,
    progress: Callable[[str], None] | None = None,
) -> float:
    """Lesion-vs-normal patch pretraining of ``model.backbone`` (in place) on the ROI boxes of
    ``dataset`` (the train split), with the ``task.lesion_pretrain_*`` settings: patches of
    :func:`lesion_patches`, then :func:`pretrain_on_lesion_patches`. Returns the mean BCE of the
    last 20 steps."""
    patches = lesion_patches(
        dataset,
        config.geometry().patch_size,
        seed=config.seed,
        bright_normals_per_breast=config.lesion_pretrain_bright_normals,
        sole_finding_outcome=config.lesion_pretrain_sole_finding_outcome,
        crops_per_roi=config.lesion_pretrain_roi_crops,
    )
    if progress is not None:
        positives = int(patches.labels.sum())
        progress(
            f"lesion pretraining: {config.lesion_pretrain_steps} steps on {positives} ROI "
            f"and {len(patches.labels) - positives} normal patches"
        )
    losses = pretrain_on_lesion_patches(
        model.backbone,
        patches,
        config.lesion_pretrain_steps,
        lr=config.lesion_pretrain_lr,
        seed=config.seed,
        malignancy_weight=config.lesion_pretrain_malignancy,
        malignancy_on_normals=config.lesion_pretrain_malignancy_normals,
        backbone_input=config.vision_input,
    )
    tail = losses[-min(len(losses), 20) :]
    final = sum(tail) / len(tail)
    if progress is not None:
        progress(
            f"lesion pretraining: BCE {sum(losses[:20]) / len(losses[:20]):.3f} -> "
            f"{final:.3f} (mean of the first / last 20 steps)"
        )
    return final


def pretrain_scorer(
    model: TopKSigLIP,
    dataset: MammoDataset,
    config: TopKSigLIPTaskConfig,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Scorer pretraining of ``model`` (in place) on the ROI cells of ``dataset``'s breasts
    with the ``task.scorer_pretrain_*`` settings (:func:`pretrain_scorer_on_roi_cells`)."""
    losses = pretrain_scorer_on_roi_cells(
        model,
        dataset,
        config.scorer_pretrain_steps,
        lr=config.scorer_pretrain_lr,
        backbone_lr_scale=config.vision_lr_scale,
        batch_size=config.batch_size,
        seed=config.seed,
    )
    if progress is not None and losses:
        head, tail = losses[:20], losses[-min(len(losses), 20) :]
        progress(
            f"scorer pretraining: {config.scorer_pretrain_steps} steps, ROI cross entropy "
            f"{sum(head) / len(head):.3f} -> {sum(tail) / len(tail):.3f} "
            "(mean of the first / last 20 steps)"
        )
