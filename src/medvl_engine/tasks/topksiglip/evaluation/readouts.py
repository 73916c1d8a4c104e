"""Per-breast readouts: a table that shards over ranks, concatenates, and that the bootstrap
resamples breast by breast."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS, zero_shot_logits
from medvl_engine.data.mammo_reports import FINDING_TYPES
from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.evaluation.metrics import auroc, weighted_average_precision
from medvl_engine.tasks.topksiglip.evaluation.localisation import localisation_parts
from medvl_engine.tasks.topksiglip.evaluation.outputs import (
    BreastSamples,
    MammoEvalOutputs,
    collect_outputs,
)

if TYPE_CHECKING:
    from medvl_engine.data.mammo_dataset import BreastSample
    from medvl_engine.models.topksiglip import TopKSigLIP

__all__ = [
    "ReadoutTable",
    "bootstrap_readouts",
    "label_columns",
    "model_readouts",
    "outputs_probabilities",
    "prompt_probabilities",
    "readout_metrics",
    "readout_table",
    "zero_shot_columns",
]


def _safe_auroc(labels: np.ndarray, scores: np.ndarray, known: np.ndarray) -> float | None:
    """AUROC over the breasts with a label; None when those hold one class only."""
    known = np.asarray(known, dtype=bool)
    labels = np.asarray(labels, dtype=bool)[known]
    if labels.all() or not labels.any():
        return None
    return auroc(labels, np.asarray(scores)[known])


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


def outputs_probabilities(model: TopKSigLIP, outputs: MammoEvalOutputs) -> dict[str, np.ndarray]:
    """``{task: [n, classes]}``: the prompt probabilities each breast was read with when the
    outputs carry them (:func:`collect_outputs` scores each breast as ``medvl topk`` and the
    dock do, to the bit), else computed from the embeddings (:func:`prompt_probabilities`)."""
    if outputs.zero_shot is not None:
        return outputs.zero_shot
    return prompt_probabilities(model, outputs.embeddings)


def prompt_probabilities(model: TopKSigLIP, embeddings: torch.Tensor) -> dict[str, np.ndarray]:
    """Per zero-shot task, the softmax over its prompts ``[B, C]`` of the image embeddings
    ``[B, D]`` (numpy, float32)."""
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
    probs = outputs_probabilities(model, outputs)
    table = readout_table(outputs, zero_shot_columns(probs), model.geometry)
    for sweep_k in k_sweep:
        suffix = f"@k{int(sweep_k)}"
        swept = collect_outputs(model, rows, k=int(sweep_k), batch_size=batch_size)
        columns = zero_shot_columns(outputs_probabilities(model, swept), suffix)
        extra = readout_table(swept, columns, None, suffix=suffix)  # labels only, no maps
        table = table.with_scores(extra.scores, extra.truth, extra.known, extra.groups)
    return table, outputs
