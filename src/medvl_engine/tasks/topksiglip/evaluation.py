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
* Per-breast readouts (:class:`ReadoutTable`): every readout above kept breast by breast, so
  that parts scored on different ranks concatenate into the metrics of all breasts, and a
  bootstrap can resample breasts (:func:`bootstrap_readouts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS, zero_shot_logits
from medvl_engine.data.mammo_reports import DENSITY_LABELS, FINDING_TYPES
from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.evaluation.metrics import (
    auroc,
    macro_auroc,
    pointing_game,
    weighted_average_precision,
)

if TYPE_CHECKING:
    from medvl_engine.data.mammo_dataset import BreastSample
    from medvl_engine.models.topksiglip import TopKSigLIP

__all__ = [
    "MammoEvalOutputs",
    "ReadoutTable",
    "bootstrap_readouts",
    "collect_outputs",
    "fit_linear_probe",
    "label_columns",
    "localisation_parts",
    "model_readouts",
    "outputs_of_samples",
    "probe_readouts",
    "readout_metrics",
    "readout_table",
    "zero_shot_columns",
    "evaluate_mammography",
    "linear_probe_auroc",
    "linear_probe_metrics",
    "localisation_metrics",
    "zero_shot_k_sweep",
    "zero_shot_metrics",
    "BreastSamples",
]


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


def _safe_auroc(labels: np.ndarray, scores: np.ndarray, known: np.ndarray) -> float | None:
    """AUROC over the breasts with a label; None when those hold one class only."""
    known = np.asarray(known, dtype=bool)
    labels = np.asarray(labels, dtype=bool)[known]
    if labels.all() or not labels.any():
        return None
    return auroc(labels, np.asarray(scores)[known])


def zero_shot_metrics(model: TopKSigLIP, outputs: MammoEvalOutputs) -> dict[str, float]:
    """Zero-shot AUROCs with the paper's prompts; metrics undefined on this data are left out.

    Keys: ``auroc_<finding>``, ``auroc_findings_avg``, ``auroc_cancer``, ``auroc_birads_<c>``,
    ``auroc_birads_avg``, ``auroc_density_<A..D>``, ``auroc_density_avg``.
    """
    probs = _prompt_probabilities(model, outputs.embeddings)
    without_maps = dataclasses.replace(outputs, importance=None)
    return readout_metrics(readout_table(without_maps, zero_shot_columns(probs), None))


def _box_mask(boxes: np.ndarray, size: int, scale: float) -> np.ndarray:
    mask = np.zeros((size, size), dtype=bool)
    for x0, y0, x1, y1 in np.asarray(boxes).reshape(-1, 4) * scale:
        mask[int(np.floor(y0)) : int(np.ceil(y1)), int(np.floor(x0)) : int(np.ceil(x1))] = True
    return mask


def localisation_parts(
    importance: np.ndarray,
    boxes: np.ndarray,
    geometry: PatchGeometry,
    ap_resolution: int = 192,
    tolerance: float | None = None,
) -> tuple[bool, float, np.ndarray, np.ndarray, np.ndarray]:
    """One breast's share of the localisation metrics: ``(hit, chance, cell_scores [N],
    positive_px [N], negative_px [N])``.

    importance ``[G, G]``; boxes ``[M, 4]`` (x0, y0, x1, y1) breast px, M >= 1. ``hit``: the
    Pointing Game on this breast; ``chance``: the share of candidates it would count a hit.
    The map painted at ``ap_resolution`` px has one value per cell, so the pixel-level AP only
    needs, per cell, its score and the numbers of ROI / non-ROI pixels painted with it
    (:func:`~medvl_engine.evaluation.metrics.weighted_average_precision` of the pooled cells
    equals the AP of the pooled pixels).
    """
    tolerance = geometry.stride / 2.0 if tolerance is None else tolerance
    centres = geometry.offset + geometry.stride * np.arange(geometry.grid) + geometry.patch_size / 2
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    # Boxes in grid-index units: the half-open range of candidate centres each box holds.
    grown = boxes + np.array([-tolerance, -tolerance, tolerance, tolerance])
    index_boxes = np.stack(
        [np.searchsorted(centres, grown[:, j], side="left") for j in range(4)], axis=1
    )
    hit = pointing_game(importance, index_boxes)
    covered = np.zeros((geometry.grid, geometry.grid), dtype=bool)
    for x0, y0, x1, y1 in index_boxes:
        covered[y0:y1, x0:x1] = True
    cells = _painted_cells(geometry, ap_resolution).ravel()
    inside = _box_mask(boxes, ap_resolution, ap_resolution / geometry.image_size).ravel()
    count = geometry.grid * geometry.grid
    positive = np.bincount(cells[inside], minlength=count).astype(np.float64)
    negative = np.bincount(cells[~inside], minlength=count).astype(np.float64)
    return hit, float(covered.mean()), np.asarray(importance).ravel(), positive, negative


def _painted_cells(geometry: PatchGeometry, resolution: int) -> np.ndarray:
    """``[R, R]``: the row-major cell index ``row * G + col`` that paints each pixel of the
    image at ``resolution`` px (a pixel shows the cell whose stride-wide band holds it)."""
    edges = geometry.cell_bounds() * resolution / geometry.image_size
    centres = np.arange(resolution) + 0.5
    cell = np.clip(np.searchsorted(edges, centres, side="right") - 1, 0, geometry.grid - 1)
    return cell[:, None] * geometry.grid + cell[None, :]


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
    table = readout_table(outputs, {}, geometry, ap_resolution, tolerance)
    return readout_metrics(table)


def _probe_scores(probs: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    if num_classes == 2:
        return auroc(labels == 1, probs[:, 1])
    return macro_auroc(labels, probs)


def fit_linear_probe(
    train_x: torch.Tensor,
    train_y: np.ndarray,
    test_x: torch.Tensor,
    num_classes: int,
    steps: int = 20_000,
    lr: float = 4e-3,
    weight_decay: float = 0.01,
    batch_size: int = 32,
    val_x: torch.Tensor | None = None,
    val_y: np.ndarray | None = None,
    eval_every: int = 500,
    seed: int = 0,
) -> np.ndarray:
    """Test class probabilities ``[n_test, num_classes]`` of one linear layer trained on frozen
    embeddings ``[n, C]`` (the paper's probe).

    Class-weighted cross entropy (weights ``n / (num_classes * n_c)``), AdamW on seeded
    minibatches of ``batch_size`` drawn without replacement each pass. With a validation set,
    the weights kept are those of the check (every ``eval_every`` steps and the last) with the
    best validation AUROC; otherwise the last.
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
    validation = (
        (val_x, val_y)
        if val_x is not None and val_y is not None and len(np.unique(val_y)) > 1
        else None
    )
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
        if validation is not None and (step % eval_every == 0 or step == steps):
            with torch.no_grad():
                probs = torch.softmax(layer(validation[0].float()), -1).numpy()
            value = _probe_scores(probs, np.asarray(validation[1]), num_classes)
            if value > best_value:
                best_value = value
                best_state = {k: v.clone() for k, v in layer.state_dict().items()}
    if best_state is not None:
        layer.load_state_dict(best_state)
    with torch.no_grad():
        return torch.softmax(layer(test_x.float()), -1).numpy()


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
    """Test AUROC of :func:`fit_linear_probe`: binary, AUROC of class 1; else macro
    one-vs-rest over the classes present in ``test_y``."""
    probs = fit_linear_probe(
        train_x,
        train_y,
        test_x,
        num_classes,
        steps=steps,
        lr=lr,
        weight_decay=weight_decay,
        batch_size=batch_size,
        val_x=val_x,
        val_y=val_y,
        eval_every=eval_every,
        seed=seed,
    )
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
    """Linear-probe test AUROC per task (``probe_auroc_<task>``; BI-RADS / density macro, with
    their one-vs-rest ``probe_auroc_<task>_<class>``); see :func:`probe_readouts`.

    Each task uses only the breasts with its label in each split; a task is left out when its
    training or test labels hold one class only (binary) or fewer than two classes.
    """
    scores, truth, known, groups = probe_readouts(
        train,
        val,
        test,
        steps=steps,
        lr=lr,
        weight_decay=weight_decay,
        batch_size=batch_size,
        eval_every=eval_every,
        seed=seed,
    )
    count = len(test.birads)
    table = ReadoutTable(
        scores,
        truth,
        known,
        groups,
        hits=np.full(count, np.nan),
        chance=np.full(count, np.nan),
        cell_scores=[np.zeros(0)] * count,
        cell_positive=[np.zeros(0)] * count,
        cell_negative=[np.zeros(0)] * count,
    )
    return readout_metrics(table)


def zero_shot_k_sweep(
    model: TopKSigLIP, dataset: BreastSamples, ks: list[int], batch_size: int = 8
) -> dict[str, float]:
    """Zero-shot AUROCs with the top ``k`` patches for each ``k`` (keys ``<metric>@k<k>``)."""
    metrics: dict[str, float] = {}
    for k in ks:
        outputs = collect_outputs(model, dataset, k=int(k), batch_size=batch_size)
        for key, value in zero_shot_metrics(model, outputs).items():
            metrics[f"{key}@k{int(k)}"] = value
    return metrics


def evaluate_mammography(
    model: TopKSigLIP, dataset: BreastSamples, k: int | None = None
) -> dict[str, float]:
    """Zero-shot AUROCs and localisation metrics of a model on a MammoDataset."""
    outputs = collect_outputs(model, dataset, k=k)
    metrics = zero_shot_metrics(model, outputs)
    metrics.update(localisation_metrics(outputs, model.geometry))
    return metrics


# -- per-breast readouts: shardable, concatenable, resampled by the bootstrap -----------------


@dataclass
class ReadoutTable:
    """Readouts of n breasts, kept breast by breast (numpy only, picklable).

    * ``scores[key]`` ``[n]``: a score per breast for the binary label ``truth[key]`` ``[n]``
      bool, over the breasts ``known[key]`` ``[n]`` bool; the metric ``key`` is its AUROC.
    * ``groups[key]``: the keys whose mean is the metric ``key`` (e.g. ``auroc_birads_avg``).
    * Localisation, for breasts with an ROI and an importance map (else NaN / empty):
      ``hits`` ``[n]`` (1.0 / 0.0), ``chance`` ``[n]``, and per breast the cells' scores,
      ROI pixel and non-ROI pixel counts (``[N]`` each; see :func:`localisation_parts`).
    """

    scores: dict[str, np.ndarray]
    truth: dict[str, np.ndarray]
    known: dict[str, np.ndarray]
    groups: dict[str, list[str]]
    hits: np.ndarray
    chance: np.ndarray
    cell_scores: list[np.ndarray] = field(default_factory=list)
    cell_positive: list[np.ndarray] = field(default_factory=list)
    cell_negative: list[np.ndarray] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.hits)

    def rows(self, rows: Sequence[int] | np.ndarray) -> ReadoutTable:
        """The table of breasts ``rows`` (in that order; repeats allowed)."""
        rows = np.asarray(rows, dtype=np.int64)
        return ReadoutTable(
            scores={k: v[rows] for k, v in self.scores.items()},
            truth={k: v[rows] for k, v in self.truth.items()},
            known={k: v[rows] for k, v in self.known.items()},
            groups=self.groups,
            hits=self.hits[rows],
            chance=self.chance[rows],
            cell_scores=[self.cell_scores[i] for i in rows],
            cell_positive=[self.cell_positive[i] for i in rows],
            cell_negative=[self.cell_negative[i] for i in rows],
        )

    def with_scores(
        self,
        scores: dict[str, np.ndarray],
        truth: dict[str, np.ndarray],
        known: dict[str, np.ndarray],
        groups: dict[str, list[str]] | None = None,
    ) -> ReadoutTable:
        """A copy with more score columns (and groups) for the same breasts."""
        return ReadoutTable(
            scores={**self.scores, **scores},
            truth={**self.truth, **truth},
            known={**self.known, **known},
            groups={**self.groups, **(groups or {})},
            hits=self.hits,
            chance=self.chance,
            cell_scores=self.cell_scores,
            cell_positive=self.cell_positive,
            cell_negative=self.cell_negative,
        )

    @staticmethod
    def concat(parts: Sequence[ReadoutTable]) -> ReadoutTable:
        """Breasts of every part, in order (parts from ranks, in rank order)."""
        if not parts:
            raise ValueError("no readout tables to concatenate")
        first = parts[0]

        def cat(name: str) -> dict[str, np.ndarray]:
            return {k: np.concatenate([getattr(p, name)[k] for p in parts]) for k in first.scores}

        return ReadoutTable(
            scores=cat("scores"),
            truth=cat("truth"),
            known=cat("known"),
            groups=first.groups,
            hits=np.concatenate([p.hits for p in parts]),
            chance=np.concatenate([p.chance for p in parts]),
            cell_scores=[c for p in parts for c in p.cell_scores],
            cell_positive=[c for p in parts for c in p.cell_positive],
            cell_negative=[c for p in parts for c in p.cell_negative],
        )


def label_columns(
    outputs: MammoEvalOutputs,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, list[str]]]:
    """``(truth, known, groups)`` of every zero-shot readout key (see
    :func:`zero_shot_metrics`): findings and cancer binary, BI-RADS and density one-vs-rest."""
    truth: dict[str, np.ndarray] = {}
    known: dict[str, np.ndarray] = {}
    groups: dict[str, list[str]] = {"auroc_findings_avg": []}
    for i, kind in enumerate(FINDING_TYPES):
        key = f"auroc_{kind.replace(' ', '_')}"
        truth[key] = np.asarray(outputs.findings[:, i], dtype=bool)
        known[key] = outputs.known("findings")
        groups["auroc_findings_avg"].append(key)
    truth["auroc_cancer"] = np.asarray(outputs.cancer, dtype=bool)
    known["auroc_cancer"] = outputs.known("cancer")
    for task, labels in (("birads", outputs.birads - 1), ("density", outputs.density)):
        group = groups.setdefault(f"auroc_{task}_avg", [])
        for c, name in enumerate(ZERO_SHOT_PROMPTS[task][0]):
            key = f"auroc_{task}_{name}"
            truth[key] = np.asarray(labels) == c
            known[key] = outputs.known(task)
            group.append(key)
    return truth, known, groups


def zero_shot_columns(probs: dict[str, np.ndarray], suffix: str = "") -> dict[str, np.ndarray]:
    """Score columns of the zero-shot readouts from prompt probabilities ``{task: [n, C]}``
    (the probability of the positive prompt / of each class); keys get ``suffix``."""
    scores = {}
    for kind in FINDING_TYPES:
        scores[f"auroc_{kind.replace(' ', '_')}{suffix}"] = probs[kind][:, 1]
    scores[f"auroc_cancer{suffix}"] = probs["cancer"][:, 1]
    for task in ("birads", "density"):
        for c, name in enumerate(ZERO_SHOT_PROMPTS[task][0]):
            scores[f"auroc_{task}_{name}{suffix}"] = probs[task][:, c]
    return scores


def readout_table(
    outputs: MammoEvalOutputs,
    scores: dict[str, np.ndarray],
    geometry: PatchGeometry | None,
    ap_resolution: int = 192,
    tolerance: float | None = None,
    suffix: str = "",
) -> ReadoutTable:
    """The table of ``scores`` (zero-shot keys, see :func:`zero_shot_columns`, with ``suffix``)
    over the breasts of ``outputs``, with the localisation of ``outputs.importance`` (none
    without a map or a geometry)."""
    truth, known, groups = label_columns(outputs)
    count = len(outputs.birads)
    hits, chance = np.full(count, np.nan), np.full(count, np.nan)
    empty = np.zeros(0)
    cells: list[list[np.ndarray]] = [[empty] * count, [empty] * count, [empty] * count]
    if outputs.importance is not None and geometry is not None:
        for i, boxes in enumerate(outputs.boxes):
            if len(boxes):
                hit, share, *parts = localisation_parts(
                    outputs.importance[i], boxes, geometry, ap_resolution, tolerance
                )
                hits[i], chance[i] = float(hit), share
                for column, part in zip(cells, parts, strict=True):
                    column[i] = part
    keep = [key for key in truth if f"{key}{suffix}" in scores]
    return ReadoutTable(
        scores={f"{k}{suffix}": np.asarray(scores[f"{k}{suffix}"], dtype=np.float64) for k in keep},
        truth={f"{k}{suffix}": truth[k] for k in keep},
        known={f"{k}{suffix}": known[k] for k in keep},
        groups={
            f"{g}{suffix}": [f"{m}{suffix}" for m in members if m in keep]
            for g, members in groups.items()
            if any(m in keep for m in members)
        },
        hits=hits,
        chance=chance,
        cell_scores=cells[0],
        cell_positive=cells[1],
        cell_negative=cells[2],
    )


def readout_metrics(table: ReadoutTable) -> dict[str, float]:
    """Metrics of a table: the AUROC of each score column over its known breasts (left out
    when they hold one class only), each group's mean of its defined members, and over breasts
    with an ROI ``pointing_game``, ``pointing_game_chance``, ``roi_cases``, ``pixel_ap`` and
    ``pixel_ap_chance`` (ROI pixel share)."""
    metrics: dict[str, float] = {}
    for key, scores in table.scores.items():
        value = _safe_auroc(table.truth[key], scores, table.known[key])
        if value is not None:
            metrics[key] = value
    for key, members in table.groups.items():
        values = [metrics[m] for m in members if m in metrics]
        if values:
            metrics[key] = float(np.mean(values))
    roi = ~np.isnan(table.hits)
    if roi.any():
        metrics["pointing_game"] = float(table.hits[roi].mean())
        metrics["pointing_game_chance"] = float(table.chance[roi].mean())
        metrics["roi_cases"] = float(roi.sum())
        picked = np.flatnonzero(roi)
        positive = np.concatenate([table.cell_positive[i] for i in picked])
        negative = np.concatenate([table.cell_negative[i] for i in picked])
        if positive.sum() > 0 and negative.sum() > 0:
            scores = np.concatenate([table.cell_scores[i] for i in picked])
            metrics["pixel_ap"] = weighted_average_precision(scores, positive, negative)
            metrics["pixel_ap_chance"] = float(positive.sum() / (positive.sum() + negative.sum()))
    return metrics


def bootstrap_readouts(
    table: ReadoutTable, n_resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> dict[str, tuple[float, float, float, float]]:
    """``{metric: (point, low, high, std)}``: :func:`readout_metrics` of the table and its
    percentile-bootstrap interval, resampling breasts with replacement.

    Each resample draws the same breasts for every metric (``numpy.random.default_rng(seed)``,
    as :func:`~medvl_engine.evaluation.metrics.bootstrap_interval` draws them); a metric
    undefined on a resample is skipped there, and its interval is NaN when never defined.
    """
    point = readout_metrics(table)
    count = len(table)
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {key: [] for key in point}
    for _ in range(n_resamples):
        rows = rng.integers(0, count, size=count)
        for key, value in readout_metrics(table.rows(rows)).items():
            if key in samples:
                samples[key].append(value)
    low_q, high_q = (1.0 - level) / 2.0, (1.0 + level) / 2.0
    result = {}
    for key, value in point.items():
        values = samples[key]
        if values:
            low, high = np.quantile(values, [low_q, high_q])
            result[key] = (value, float(low), float(high), float(np.std(values)))
        else:
            result[key] = (value, float("nan"), float("nan"), float("nan"))
    return result


class _Rows:
    """The samples ``indices`` of a dataset, as a dataset (``len`` and ``sample``)."""

    def __init__(self, dataset: BreastSamples, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def sample(self, index: int, epoch: int = 0) -> BreastSample:
        return self.dataset.sample(self.indices[index], epoch)


def _prompt_probabilities(model: TopKSigLIP, embeddings: torch.Tensor) -> dict[str, np.ndarray]:
    device = model.log_logit_scale.device
    logits = zero_shot_logits(model, embeddings.to(device))
    return {task: torch.softmax(v.float(), -1).cpu().numpy() for task, v in logits.items()}


@torch.no_grad()
def model_readouts(
    model: TopKSigLIP,
    dataset: BreastSamples,
    indices: Sequence[int] | None = None,
    k: int | None = None,
    k_sweep: Sequence[int] = (),
    batch_size: int = 8,
) -> tuple[ReadoutTable, MammoEvalOutputs]:
    """Zero-shot readouts (at ``k`` and, keys ``@k<k>``, each k of ``k_sweep``) and
    localisation of a model on the breasts ``indices`` of a MammoDataset (all when None).

    Returns the table and the frozen outputs at ``k`` (for the linear probe).
    """
    rows = _Rows(dataset, range(len(dataset)) if indices is None else indices)
    outputs = collect_outputs(model, rows, k=k, batch_size=batch_size)
    probs = _prompt_probabilities(model, outputs.embeddings)
    table = readout_table(outputs, zero_shot_columns(probs), model.geometry)
    for sweep_k in k_sweep:
        suffix = f"@k{int(sweep_k)}"
        swept = collect_outputs(model, rows, k=int(sweep_k), batch_size=batch_size)
        columns = zero_shot_columns(_prompt_probabilities(model, swept.embeddings), suffix)
        extra = readout_table(swept, columns, None, suffix=suffix)  # labels only, no maps
        table = table.with_scores(extra.scores, extra.truth, extra.known, extra.groups)
    return table, outputs


def probe_readouts(
    train: MammoEvalOutputs,
    val: MammoEvalOutputs | None,
    test: MammoEvalOutputs,
    steps: int = 20_000,
    lr: float = 4e-3,
    weight_decay: float = 0.01,
    batch_size: int = 32,
    eval_every: int = 500,
    seed: int = 0,
) -> tuple[
    dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, list[str]]
]:
    """Linear-probe score columns on the test breasts: ``(scores, truth, known, groups)``.

    Fitted on ``train``, its step chosen on ``val`` (:func:`fit_linear_probe`). Binary tasks
    give ``probe_auroc_<task>``; BI-RADS and density give one-vs-rest columns
    ``probe_auroc_<task>_<class>`` and the group ``probe_auroc_<task>`` (their mean: the macro
    AUROC over the classes present). A task whose training or test labels hold one class only
    is left out.
    """
    scores: dict[str, np.ndarray] = {}
    truth: dict[str, np.ndarray] = {}
    known: dict[str, np.ndarray] = {}
    groups: dict[str, list[str]] = {}
    train_tasks, test_tasks = _probe_tasks(train), _probe_tasks(test)
    val_tasks = _probe_tasks(val) if val is not None else {}
    for name, (train_known, labels, classes) in train_tasks.items():
        test_known, test_labels, _ = test_tasks[name]
        if len(np.unique(labels[train_known])) < 2 or len(np.unique(test_labels[test_known])) < 2:
            continue
        val_x: torch.Tensor | None = None
        val_y: np.ndarray | None = None
        if val is not None and name in val_tasks:
            val_known, val_labels, _ = val_tasks[name]
            val_x, val_y = val.embeddings[torch.from_numpy(val_known)], val_labels[val_known]
        probs = fit_linear_probe(
            train.embeddings[torch.from_numpy(train_known)],
            labels[train_known],
            test.embeddings,
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
        if classes == 2:
            key = f"probe_auroc_{name}"
            scores[key], truth[key], known[key] = probs[:, 1], test_labels == 1, test_known
            continue
        names = ZERO_SHOT_PROMPTS[name][0]
        groups[f"probe_auroc_{name}"] = []
        for c in range(classes):
            key = f"probe_auroc_{name}_{names[c]}"
            scores[key], truth[key], known[key] = probs[:, c], test_labels == c, test_known
            groups[f"probe_auroc_{name}"].append(key)
    return scores, truth, known, groups
