"""TopKSigLIP evaluation (paper Sec. 4.4): zero-shot AUROC, linear probe, localisation.

* Zero-shot: class scores are softmax probabilities over each task's prompts (Tables 9-12);
  AUROC for the four finding types and cancer (binary), BI-RADS 1-5 and density A-D
  (one-vs-rest per class, plus their mean).
* Zero-shot k sweep: the same readouts with the top ``k`` patches for each ``k`` of a sweep
  (15, 30, 45 in Tables 1-2; keys suffixed ``@k<k>``).
* Linear probe: one fully connected layer per task on frozen image embeddings, class-weighted
  cross entropy, AdamW (20,000 iterations, lr 4e-3, weight decay 0.01, batch size 32); fitted on
  the training split, the iteration kept is the one with the best validation AUROC (checked
  every ``eval_every`` iterations), and the test split's AUROC is reported (macro one-vs-rest).
* Missing labels: a breast without a label for a task is left out of that task's AUROC and
  probe (its BI-RADS is 0, its density -1, its cancer / findings ``*_known`` mask False).
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
    "linear_probe_metrics",
    "localisation_metrics",
    "zero_shot_k_sweep",
    "zero_shot_metrics",
]


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
def collect_outputs(model, dataset, k: int | None = None, batch_size: int = 8) -> MammoEvalOutputs:
    """Run the vision tower (eval mode, no augmentation) over every sample of a MammoDataset."""
    model.eval()
    device = model.log_logit_scale.device
    embeddings, importance, boxes = [], [], []
    birads, density, cancer, findings = [], [], [], []
    cancer_known, findings_known = [], []
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
            birads.append(record.birads or 0)
            density.append(-1 if record.density is None else DENSITY_LABELS.index(record.density))
            cancer.append(bool(record.cancer))
            cancer_known.append(record.cancer is not None)
            findings.append([kind in (record.findings or []) for kind in FINDING_TYPES])
            findings_known.append(record.findings is not None)
            boxes.append(s.boxes.numpy().reshape(-1, 4) if s.has_roi else np.zeros((0, 4)))
    return MammoEvalOutputs(
        embeddings=torch.cat(embeddings),
        importance=np.concatenate(importance) if importance else None,
        birads=np.asarray(birads),
        density=np.asarray(density),
        cancer=np.asarray(cancer, dtype=bool),
        findings=np.asarray(findings, dtype=bool).reshape(-1, len(FINDING_TYPES)),
        boxes=boxes,
        cancer_known=np.asarray(cancer_known, dtype=bool),
        findings_known=np.asarray(findings_known, dtype=bool),
    )


def _safe_auroc(labels: np.ndarray, scores: np.ndarray, known: np.ndarray) -> float | None:
    """AUROC over the breasts with a label; None when those hold one class only."""
    known = np.asarray(known, dtype=bool)
    labels = np.asarray(labels, dtype=bool)[known]
    if labels.all() or not labels.any():
        return None
    return auroc(labels, np.asarray(scores)[known])


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
        value = _safe_auroc(outputs.findings[:, i], probs[kind][:, 1], outputs.known("findings"))
        if value is not None:
            metrics[f"auroc_{kind.replace(' ', '_')}"] = value
            finding_values.append(value)
    if finding_values:
        metrics["auroc_findings_avg"] = float(np.mean(finding_values))
    value = _safe_auroc(outputs.cancer, probs["cancer"][:, 1], outputs.known("cancer"))
    if value is not None:
        metrics["auroc_cancer"] = value
    for task, labels in (("birads", outputs.birads - 1), ("density", outputs.density)):
        names = ZERO_SHOT_PROMPTS[task][0]
        values = []
        for c, name in enumerate(names):
            value = _safe_auroc(labels == c, probs[task][:, c], outputs.known(task))
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


def _probe_scores(probs: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    if num_classes == 2:
        return auroc(labels == 1, probs[:, 1])
    return macro_auroc(labels, probs)


def linear_probe_auroc(
    train_x: torch.Tensor,
    train_y: np.ndarray,
    test_x: torch.Tensor,
    test_y: np.ndarray,
    num_classes: int,
    steps: int = 20_000,
    lr: float = 4e-3,
    weight_decay: float = 0.01,
    batch_size: int = 32,
    val_x: torch.Tensor | None = None,
    val_y: np.ndarray | None = None,
    eval_every: int = 500,
    seed: int = 0,
) -> float:
    """Test AUROC of one linear layer trained on frozen embeddings ``[n, C]`` (the paper's probe).

    Class-weighted cross entropy (weights ``n / (num_classes * n_c)``), AdamW on seeded
    minibatches of ``batch_size`` drawn without replacement each pass. With a validation set,
    the weights kept are those of the check (every ``eval_every`` steps and the last) with the
    best validation AUROC; otherwise the last. Binary: AUROC of class 1; else macro one-vs-rest.
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
    validate = val_x is not None and val_y is not None and len(np.unique(val_y)) > 1
    best_value, best_state = -1.0, None
    order = torch.randperm(len(y), generator=generator)
    cursor = 0
    for step in range(1, steps + 1):
        if cursor >= len(order):
            order, cursor = torch.randperm(len(y), generator=generator), 0
        chosen = order[cursor : cursor + batch_size]
        cursor += batch_size
        with torch.enable_grad():
            optimizer.zero_grad()
            F.cross_entropy(layer(x[chosen]), y[chosen], weight=weights).backward()
            optimizer.step()
        if validate and (step % eval_every == 0 or step == steps):
            with torch.no_grad():
                probs = torch.softmax(layer(val_x.float()), -1).numpy()
            value = _probe_scores(probs, np.asarray(val_y), num_classes)
            if value > best_value:
                best_value = value
                best_state = {k: v.clone() for k, v in layer.state_dict().items()}
    if best_state is not None:
        layer.load_state_dict(best_state)
    with torch.no_grad():
        probs = torch.softmax(layer(test_x.float()), -1).numpy()
    return _probe_scores(probs, np.asarray(test_y), num_classes)


def _probe_tasks(outputs: MammoEvalOutputs) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """Per probe task: (known mask, class labels, number of classes)."""
    tasks = {
        "birads": (outputs.known("birads"), np.asarray(outputs.birads) - 1, 5),
        "density": (outputs.known("density"), np.asarray(outputs.density), len(DENSITY_LABELS)),
        "cancer": (outputs.known("cancer"), np.asarray(outputs.cancer, dtype=int), 2),
    }
    for i, kind in enumerate(FINDING_TYPES):
        labels = np.asarray(outputs.findings[:, i], dtype=int)
        tasks[kind.replace(" ", "_")] = (outputs.known("findings"), labels, 2)
    return tasks


def linear_probe_metrics(
    train: MammoEvalOutputs,
    val: MammoEvalOutputs | None,
    test: MammoEvalOutputs,
    steps: int = 20_000,
    lr: float = 4e-3,
    weight_decay: float = 0.01,
    batch_size: int = 32,
    eval_every: int = 500,
    seed: int = 0,
) -> dict[str, float]:
    """Linear-probe test AUROC per task (``probe_auroc_<task>``; BI-RADS / density macro).

    Each task uses only the breasts with its label in each split; a task is left out when its
    training or test labels hold one class only (binary) or fewer than two classes.
    """
    metrics: dict[str, float] = {}
    train_tasks, test_tasks = _probe_tasks(train), _probe_tasks(test)
    val_tasks = _probe_tasks(val) if val is not None else {}
    for name, (known, labels, classes) in train_tasks.items():
        test_known, test_labels, _ = test_tasks[name]
        if len(np.unique(labels[known])) < 2 or len(np.unique(test_labels[test_known])) < 2:
            continue
        val_x = val_y = None
        if name in val_tasks:
            val_known, val_labels, _ = val_tasks[name]
            val_x, val_y = val.embeddings[torch.from_numpy(val_known)], val_labels[val_known]
        metrics[f"probe_auroc_{name}"] = linear_probe_auroc(
            train.embeddings[torch.from_numpy(known)],
            labels[known],
            test.embeddings[torch.from_numpy(test_known)],
            test_labels[test_known],
            classes,
            steps=steps,
            lr=lr,
            weight_decay=weight_decay,
            batch_size=batch_size,
            val_x=val_x,
            val_y=val_y,
            eval_every=eval_every,
            seed=seed,
        )
    return metrics


def zero_shot_k_sweep(model, dataset, ks: list[int], batch_size: int = 8) -> dict[str, float]:
    """Zero-shot AUROCs with the top ``k`` patches for each ``k`` (keys ``<metric>@k<k>``)."""
    metrics: dict[str, float] = {}
    for k in ks:
        outputs = collect_outputs(model, dataset, k=int(k), batch_size=batch_size)
        for key, value in zero_shot_metrics(model, outputs).items():
            metrics[f"{key}@k{int(k)}"] = value
    return metrics


def evaluate_mammography(model, dataset, k: int | None = None) -> dict[str, float]:
    """Zero-shot AUROCs and localisation metrics of a model on a MammoDataset."""
    outputs = collect_outputs(model, dataset, k=k)
    metrics = zero_shot_metrics(model, outputs)
    metrics.update(localisation_metrics(outputs, model.geometry))
    return metrics
