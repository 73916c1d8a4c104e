"""TopKSigLIP evaluation (paper Sec. 4.4): zero-shot AUROC, linear probe, localisation.

* Zero-shot: class scores are softmax probabilities over each task's prompts (Tables 9-12);
  AUROC for the four finding types and cancer (binary), BI-RADS 1-5 and density A-D
  (one-vs-rest per class, plus their mean).
* Linear probe: one fully connected layer on frozen image embeddings, class-weighted cross
  entropy, AdamW (lr 4e-3, weight decay 0.01), full-batch, macro one-vs-rest AUROC.
* Localisation: the importance map ``w / sum w`` on the ``G x G`` grid against ROI boxes;
  pixel-level average precision (map painted on the breast image at ``ap_resolution`` px over its
  candidate cells, pixels pooled over all images with an ROI) and the Pointing Game (hit when the
  centre of the top-scoring candidate lies in a box grown by ``tolerance`` px). Each metric
  comes with its chance level (``*_chance``: ROI pixel share; share of candidates counted a hit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS, zero_shot_logits
from medvl_engine.data.mammo_reports import DENSITY_LABELS, FINDING_TYPES
from medvl_engine.evaluation.metrics import auroc, average_precision, macro_auroc, pointing_game
from medvl_engine.models.topk import PatchGeometry

__all__ = [
    "MammoEvalOutputs",
    "collect_outputs",
    "evaluate_mammography",
    "linear_probe_auroc",
    "localisation_metrics",
    "zero_shot_metrics",
]


@dataclass
class MammoEvalOutputs:
    """Frozen outputs on n breasts: embeddings ``[n, C]``, importance ``[n, G, G]`` (or None),
    labels (birads ``[n]`` 1-5, density ``[n]`` 0-3, cancer ``[n]`` bool, findings ``[n, 4]``
    bool) and ROI boxes per breast ``[M_i, 4]`` (x0, y0, x1, y1) breast px."""

    embeddings: torch.Tensor
    importance: np.ndarray | None
    birads: np.ndarray
    density: np.ndarray
    cancer: np.ndarray
    findings: np.ndarray
    boxes: list[np.ndarray]


@torch.no_grad()
def collect_outputs(model, dataset, k: int | None = None, batch_size: int = 8) -> MammoEvalOutputs:
    """Run the vision tower (eval mode, no augmentation) over every sample of a MammoDataset."""
    model.eval()
    device = model.log_logit_scale.device
    embeddings, importance, boxes = [], [], []
    birads, density, cancer, findings = [], [], [], []
    for start in range(0, len(dataset), batch_size):
        samples = [dataset.sample(i) for i in range(start, min(start + batch_size, len(dataset)))]
        images = torch.stack([s.image for s in samples]).to(device)
        out = model.encode_image(images, k=k)
        embeddings.append(out.embedding.float().cpu())
        if out.log_weights is not None:
            grid = model.geometry.grid
            probs = torch.softmax(out.log_weights.float(), dim=-1).view(-1, grid, grid)
            importance.append(probs.cpu().numpy())
        for s in samples:
            record = s.record
            birads.append(record.birads)
            density.append(DENSITY_LABELS.index(record.density))
            cancer.append(record.cancer)
            findings.append([kind in record.findings for kind in FINDING_TYPES])
            boxes.append(s.boxes.numpy().reshape(-1, 4) if s.has_roi else np.zeros((0, 4)))
    return MammoEvalOutputs(
        embeddings=torch.cat(embeddings),
        importance=np.concatenate(importance) if importance else None,
        birads=np.asarray(birads),
        density=np.asarray(density),
        cancer=np.asarray(cancer, dtype=bool),
        findings=np.asarray(findings, dtype=bool).reshape(-1, len(FINDING_TYPES)),
        boxes=boxes,
    )


def _safe_auroc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    labels = np.asarray(labels, dtype=bool)
    if labels.all() or not labels.any():
        return None
    return auroc(labels, scores)


def zero_shot_metrics(model, outputs: MammoEvalOutputs) -> dict[str, float]:
    """Zero-shot AUROCs with the paper's prompts; metrics undefined on this data are left out.

    Keys: ``auroc_<finding>``, ``auroc_findings_avg``, ``auroc_cancer``, ``auroc_birads_<c>``,
    ``auroc_birads_avg``, ``auroc_density_<A..D>``, ``auroc_density_avg``.
    """
    device = model.log_logit_scale.device
    logits = zero_shot_logits(model, outputs.embeddings.to(device))
    probs = {task: torch.softmax(v.float(), -1).cpu().numpy() for task, v in logits.items()}
    metrics: dict[str, float] = {}
    finding_values = []
    for i, kind in enumerate(FINDING_TYPES):
        value = _safe_auroc(outputs.findings[:, i], probs[kind][:, 1])
        if value is not None:
            metrics[f"auroc_{kind.replace(' ', '_')}"] = value
            finding_values.append(value)
    if finding_values:
        metrics["auroc_findings_avg"] = float(np.mean(finding_values))
    value = _safe_auroc(outputs.cancer, probs["cancer"][:, 1])
    if value is not None:
        metrics["auroc_cancer"] = value
    for task, labels in (("birads", outputs.birads - 1), ("density", outputs.density)):
        names = ZERO_SHOT_PROMPTS[task][0]
        values = []
        for c, name in enumerate(names):
            value = _safe_auroc(labels == c, probs[task][:, c])
            if value is not None:
                metrics[f"auroc_{task}_{name}"] = value
                values.append(value)
        if values:
            metrics[f"auroc_{task}_avg"] = float(np.mean(values))
    return metrics


def _paint(importance: np.ndarray, geometry: PatchGeometry, resolution: int) -> np.ndarray:
    """Importance ``[G, G]`` painted over its candidate cells at ``resolution`` px ``[R, R]``."""
    edges = geometry.cell_bounds() * resolution / geometry.image_size
    centres = np.arange(resolution) + 0.5
    cell = np.clip(np.searchsorted(edges, centres, side="right") - 1, 0, geometry.grid - 1)
    return importance[np.ix_(cell, cell)]


def _box_mask(boxes: np.ndarray, size: int, scale: float) -> np.ndarray:
    mask = np.zeros((size, size), dtype=bool)
    for x0, y0, x1, y1 in np.asarray(boxes).reshape(-1, 4) * scale:
        mask[int(np.floor(y0)) : int(np.ceil(y1)), int(np.floor(x0)) : int(np.ceil(x1))] = True
    return mask


def localisation_metrics(
    outputs: MammoEvalOutputs,
    geometry: PatchGeometry,
    ap_resolution: int = 192,
    tolerance: float | None = None,
) -> dict[str, float]:
    """Pixel-level AP and Pointing Game of the importance maps over breasts with ROI boxes.

    tolerance: px the boxes grow by for the Pointing Game (default half the stride, i.e. a hit
    when the lesion reaches into the top candidate's cell). Returns ``{}`` when no breast has an
    ROI or the model has no importance map.
    """
    if outputs.importance is None:
        return {}
    pick = [i for i, b in enumerate(outputs.boxes) if len(b)]
    if not pick:
        return {}
    tolerance = geometry.stride / 2.0 if tolerance is None else tolerance
    centres = geometry.offset + geometry.stride * np.arange(geometry.grid) + geometry.patch_size / 2
    scale = ap_resolution / geometry.image_size
    hits, chance, scores, labels = [], [], [], []
    for i in pick:
        boxes = outputs.boxes[i]
        # Boxes in grid-index units: the half-open range of candidate centres each box holds.
        grown = boxes + np.array([-tolerance, -tolerance, tolerance, tolerance])
        index_boxes = np.stack(
            [
                np.searchsorted(centres, grown[:, 0], side="left"),
                np.searchsorted(centres, grown[:, 1], side="left"),
                np.searchsorted(centres, grown[:, 2], side="left"),
                np.searchsorted(centres, grown[:, 3], side="left"),
            ],
            axis=1,
        )
        hits.append(pointing_game(outputs.importance[i], index_boxes))
        covered = np.zeros((geometry.grid, geometry.grid), dtype=bool)
        for x0, y0, x1, y1 in index_boxes:
            covered[y0:y1, x0:x1] = True
        chance.append(covered.mean())
        scores.append(_paint(outputs.importance[i], geometry, ap_resolution).ravel())
        labels.append(_box_mask(boxes, ap_resolution, scale).ravel())
    metrics = {
        "pointing_game": float(np.mean(hits)),
        "pointing_game_chance": float(np.mean(chance)),
        "roi_cases": float(len(pick)),
    }
    label_array = np.concatenate(labels)
    if label_array.any() and not label_array.all():
        metrics["pixel_ap"] = average_precision(label_array, np.concatenate(scores))
        metrics["pixel_ap_chance"] = float(label_array.mean())
    return metrics


def linear_probe_auroc(
    train_x: torch.Tensor,
    train_y: np.ndarray,
    test_x: torch.Tensor,
    test_y: np.ndarray,
    num_classes: int,
    steps: int = 500,
    lr: float = 4e-3,
    weight_decay: float = 0.01,
    seed: int = 0,
) -> float:
    """Macro one-vs-rest AUROC of a linear layer trained on frozen embeddings ``[n, C]``.

    Class-weighted cross entropy (weights ``n / (num_classes * n_c)``), AdamW, full batch.
    """
    generator = torch.Generator().manual_seed(seed)
    x, y = train_x.float(), torch.as_tensor(np.asarray(train_y), dtype=torch.long)
    layer = torch.nn.Linear(x.shape[1], num_classes)
    with torch.no_grad():
        layer.weight.normal_(0.0, 0.01, generator=generator)
        layer.bias.zero_()
    counts = torch.bincount(y, minlength=num_classes).float()
    weights = torch.where(counts > 0, len(y) / (num_classes * counts.clamp_min(1)), 0.0)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=weight_decay)
    with torch.enable_grad():
        for _ in range(steps):
            optimizer.zero_grad()
            F.cross_entropy(layer(x), y, weight=weights).backward()
            optimizer.step()
    with torch.no_grad():
        probs = torch.softmax(layer(test_x.float()), -1).numpy()
    test_y = np.asarray(test_y)
    if num_classes == 2:
        return auroc(test_y == 1, probs[:, 1])
    return macro_auroc(test_y, probs)


def evaluate_mammography(model, dataset, k: int | None = None) -> dict[str, float]:
    """Zero-shot AUROCs and localisation metrics of a model on a MammoDataset."""
    outputs = collect_outputs(model, dataset, k=k)
    metrics = zero_shot_metrics(model, outputs)
    metrics.update(localisation_metrics(outputs, model.geometry))
    return metrics
