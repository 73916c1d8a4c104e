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
    all known) and ROI boxes per breast ``[M_i, 4]`` (x0, y0, x1, y1) breast px.

    zero_shot: ``{task: [n, classes]}`` float32, the prompt probabilities of each breast as
    the TopK dock and ``medvl topk`` show them (None when not computed); selected ``[n, K]``
    int64: the candidates each breast's K patches are, in rank order (None for the full-image
    tower or when not computed); k: the K they were computed at (None when not known).
    """

    embeddings: torch.Tensor
    importance: np.ndarray | None
    birads: np.ndarray
    density: np.ndarray
    cancer: np.ndarray
    findings: np.ndarray
    boxes: list[np.ndarray]
    cancer_known: np.ndarray | None = None
    findings_known: np.ndarray | None = None
    zero_shot: dict[str, np.ndarray] | None = None
    selected: np.ndarray | None = None
    k: int | None = None

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
    """Score every sample of a MammoDataset (eval mode, no augmentation) at ``k`` patches
    (None: the model's ``config.k``) with
    :func:`medvl_engine.models.topksiglip_inference.score_breasts`, the computation behind
    ``medvl topk`` and the TopK dock: embeddings, importance maps, selected candidates and
    zero-shot prompt probabilities are those a user sees for the same breast, to the last bit.

    ``batch_size`` breasts are read at a time; each is scored on its own, so the outputs do
    not depend on it. The prompts are encoded once.
    """
    from medvl_engine.models.topksiglip_inference import prompt_embeddings, score_breasts

    prompts = prompt_embeddings(model.eval())
    embeddings: list[torch.Tensor] = []
    importance: list[np.ndarray] = []
    selected: list[np.ndarray] = []
    zero_shot: dict[str, list[np.ndarray]] = {task: [] for task in prompts}
    samples: list[BreastSample] = []
    chosen = int(model.config.k if k is None else k)
    step = max(int(batch_size), 1)
    for start in range(0, len(dataset), step):
        chunk = [dataset.sample(i) for i in range(start, min(start + step, len(dataset)))]
        scored = score_breasts(model, torch.stack([s.image for s in chunk]), chosen, prompts)
        embeddings.append(scored.embedding)
        if scored.importance is not None and scored.indices is not None:
            importance.append(scored.importance)
            selected.append(scored.indices)
        for task, probs in scored.zero_shot.items():
            zero_shot[task].append(probs)
        samples.extend(chunk)
    outputs = outputs_of_samples(
        samples,
        torch.cat(embeddings),
        np.concatenate(importance) if importance else None,
    )
    outputs.zero_shot = {task: np.concatenate(rows) for task, rows in zero_shot.items()}
    outputs.selected = np.concatenate(selected) if selected else None
    outputs.k = chosen
    return outputs


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
