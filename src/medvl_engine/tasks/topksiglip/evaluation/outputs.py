"""Frozen outputs of a TopKSigLIP model on a set of breasts: embeddings, importance maps, labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from medvl_engine.data.mammo_reports import DENSITY_LABELS, FINDING_TYPES

if TYPE_CHECKING:
    from medvl_engine.data.mammo_dataset import BreastSample
    from medvl_engine.models.topksiglip import TopKSigLIP

__all__ = ["BreastSamples", "MammoEvalOutputs", "collect_outputs", "outputs_of_samples"]


class BreastSamples(Protocol):
    """Breast samples by index: a MammoDataset or a subset of one."""

    def __len__(self) -> int: ...

    def sample(self, index: int, epoch: int = 0) -> BreastSample: ...


@dataclass
class MammoEvalOutputs:
    """Frozen outputs on n breasts: embeddings ``[n, C]``, importance ``[n, G, G]`` (or None),
    labels (birads ``[n]`` 1-5, 0 = missing; density ``[n]`` 0-3, -1 = missing; cancer ``[n]``
    bool; findings ``[n, 4]`` bool; ``cancer_known`` / ``findings_known`` ``[n]`` bool, None =
    all known) and ROI boxes per breast ``[M_i, 4]`` (x0, y0, x1, y1) breast px."""

    embeddings: torch.Tensor
    importance: np.ndarray | None
    birads: np.ndarray
    density: np.ndarray
    cancer: np.ndarray
    findings: np.ndarray
    boxes: list[np.ndarray]
    cancer_known: np.ndarray | None = None
    findings_known: np.ndarray | None = None

    def known(self, task: str) -> np.ndarray:
        """``[n]`` bool: the breasts that have a label for ``task`` (birads, density, cancer,
        findings)."""
        count = len(self.birads)
        if task == "birads":
            return np.asarray(self.birads) >= 1
        if task == "density":
            return np.asarray(self.density) >= 0
        mask = self.cancer_known if task == "cancer" else self.findings_known
        return np.ones(count, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)


@torch.no_grad()
def collect_outputs(
    model: TopKSigLIP, dataset: BreastSamples, k: int | None = None, batch_size: int = 8
) -> MammoEvalOutputs:
    """Run the vision tower (eval mode, no augmentation) over every sample of a MammoDataset."""
    model.eval()
    device = model.log_logit_scale.device
    embeddings: list[torch.Tensor] = []
    importance: list[np.ndarray] = []
    samples: list[BreastSample] = []
    for start in range(0, len(dataset), batch_size):
        chunk = [dataset.sample(i) for i in range(start, min(start + batch_size, len(dataset)))]
        images = torch.stack([s.image for s in chunk]).to(device)
        out = model.encode_image(images, k=k)
        embeddings.append(out.embedding.float().cpu())
        if out.log_weights is not None:
            grid = model.geometry.grid
            probs = torch.softmax(out.log_weights.float(), dim=-1).view(-1, grid, grid)
            importance.append(probs.cpu().numpy())
        samples.extend(chunk)
    return outputs_of_samples(
        samples,
        torch.cat(embeddings),
        np.concatenate(importance) if importance else None,
    )


def outputs_of_samples(
    samples: Sequence[BreastSample], embeddings: torch.Tensor, importance: np.ndarray | None
) -> MammoEvalOutputs:
    """:class:`MammoEvalOutputs` of breast samples (labels and ROI boxes from each sample's
    record) with the given embeddings ``[n, C]`` and importance maps ``[n, G, G]``."""
    birads, density, cancer, findings, boxes = [], [], [], [], []
    cancer_known, findings_known = [], []
    for s in samples:
        record = s.record
        birads.append(record.birads or 0)
        density.append(-1 if record.density is None else DENSITY_LABELS.index(record.density))
        cancer.append(bool(record.cancer))
        cancer_known.append(record.cancer is not None)
        findings.append([kind in (record.findings or []) for kind in FINDING_TYPES])
        findings_known.append(record.findings is not None)
        boxes.append(s.boxes.numpy().reshape(-1, 4) if s.has_roi else np.zeros((0, 4)))
    return MammoEvalOutputs(
        embeddings=embeddings,
        importance=importance,
        birads=np.asarray(birads),
        density=np.asarray(density),
        cancer=np.asarray(cancer, dtype=bool),
        findings=np.asarray(findings, dtype=bool).reshape(-1, len(FINDING_TYPES)),
        boxes=boxes,
        cancer_known=np.asarray(cancer_known, dtype=bool),
        findings_known=np.asarray(findings_known, dtype=bool),
    )
