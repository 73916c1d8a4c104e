"""Metrics of a whole set of breasts: zero-shot AUROCs, localisation, the k sweep."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.tasks.topksiglip.evaluation.outputs import (
    BreastSamples,
    MammoEvalOutputs,
    collect_outputs,
)
from medvl_engine.tasks.topksiglip.evaluation.readouts import (
    outputs_probabilities,
    readout_metrics,
    readout_table,
    zero_shot_columns,
)

if TYPE_CHECKING:
    from medvl_engine.models.topksiglip import TopKSigLIP

__all__ = ["evaluate_mammography", "localisation_metrics", "zero_shot_k_sweep", "zero_shot_metrics"]


def zero_shot_metrics(model: TopKSigLIP, outputs: MammoEvalOutputs) -> dict[str, float]:
    """Zero-shot AUROCs with the paper's prompts; metrics undefined on this data are left out.

    Keys: ``auroc_<finding>``, ``auroc_findings_avg``, ``auroc_cancer``, ``auroc_birads_<c>``,
    ``auroc_birads_avg``, ``auroc_density_<A..D>``, ``auroc_density_avg``.
    """
    probs = outputs_probabilities(model, outputs)
    without_maps = dataclasses.replace(outputs, importance=None)
    return readout_metrics(readout_table(without_maps, zero_shot_columns(probs), None))


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
