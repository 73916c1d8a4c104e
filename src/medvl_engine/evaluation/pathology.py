"""Pathology zero-shot evaluation: TCGA-OT-style slide classification and patch classification.

Slide level (LIMIT Sec. 3.3, Eq. 5): the choices of a slide are the classes of its organ,
each written as the prompt ``"<tissue> <class>"``; every prompt ``c_k`` pools the slide's
patches with report-guided attention and ``y = argmax_k cos(h_W(c_k), c_k)``. Balanced
accuracy is reported per organ and overall, each with a 1,000-trial bootstrap std.
Patch level: ``y = argmax_k cos(v, c_k)``; balanced accuracy and one-vs-rest AUROC.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.evaluation.metrics import balanced_accuracy, bootstrap_std, macro_auroc
from medvl_engine.models.limit import pool_patches

__all__ = [
    "SlideExample",
    "slide_class_scores",
    "zero_shot_slides",
    "zero_shot_patches",
    "DEFAULT_TEMPLATE",
]

DEFAULT_TEMPLATE = "{tissue} {class}"
TextEncoder = Callable[[list[str]], torch.Tensor]


@dataclasses.dataclass
class SlideExample:
    """One evaluation slide: patch features ``[M, D]``, its organ and its true class name."""

    features: torch.Tensor
    organ: str
    label: str
    slide_id: str = ""


def slide_class_scores(
    features: torch.Tensor,
    class_embeddings: torch.Tensor,
    tau_attn: float,
    pooling: str = "report_guided",
    k: int = 10,
    normalize_features: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``cos(h_W(c_k), c_k)`` (Eq. 5): slide ``[M, D]``, classes ``[C, D]`` -> ``[C]``."""
    patches = features.float()
    if normalize_features:
        patches = F.normalize(patches, dim=-1)
    classes = F.normalize(class_embeddings.float(), dim=-1)
    pooled = pool_patches(patches, classes, pooling, tau_attn, None, k, generator)  # [C, D]
    return F.cosine_similarity(pooled, classes, dim=-1)


def _summary(labels: list[Any], predictions: list[Any], trials: int, seed: int) -> dict[str, float]:
    y, p = np.asarray(labels, dtype=object), np.asarray(predictions, dtype=object)
    return {
        "balanced_accuracy": balanced_accuracy(y, p),
        "std": bootstrap_std(balanced_accuracy, y, p, trials=trials, seed=seed),
        "n": float(len(y)),
    }


@torch.no_grad()
def zero_shot_slides(
    slides: Sequence[SlideExample],
    classes_by_organ: Mapping[str, Sequence[str]],
    encode_text: TextEncoder,
    tau_attn: float,
    *,
    template: str = DEFAULT_TEMPLATE,
    tissue_names: Mapping[str, str] | None = None,
    pooling: str = "report_guided",
    k: int = 10,
    normalize_features: bool = True,
    trials: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Organ-restricted zero-shot slide classification (TCGA-OT protocol).

    classes_by_organ: the choices of each organ; template: prompt with ``{tissue}`` (the
    organ, or ``tissue_names[organ]``) and ``{class}``; encode_text: texts -> ``[T, D]``.
    Returns ``{"per_organ": {organ: {"balanced_accuracy", "std", "n"}}, "overall": {...},
    "organ_mean": float, "predictions": [(slide_id, organ, label, predicted), ...]}``.
    The overall score treats (organ, class) pairs as the classes.
    """
    generator = torch.Generator().manual_seed(seed)
    embeddings: dict[str, torch.Tensor] = {}
    rows = []
    for slide in slides:
        options = list(classes_by_organ.get(slide.organ, ()))
        if slide.label not in options:
            raise ValueError(
                f"slide {slide.slide_id or '?'} has label {slide.label!r}, not among the "
                f"choices of organ {slide.organ!r}: {options}"
            )
        if slide.organ not in embeddings:
            tissue = (tissue_names or {}).get(slide.organ, slide.organ)
            prompts = [template.format(**{"tissue": tissue, "class": c}) for c in options]
            embeddings[slide.organ] = encode_text(prompts).float().cpu()
        scores = slide_class_scores(
            slide.features.cpu(),
            embeddings[slide.organ],
            tau_attn,
            pooling,
            k,
            normalize_features,
            generator,
        )
        rows.append((slide.slide_id, slide.organ, slide.label, options[int(scores.argmax())]))
    per_organ = {}
    for organ in sorted({row[1] for row in rows}):
        chosen = [row for row in rows if row[1] == organ]
        per_organ[organ] = _summary([r[2] for r in chosen], [r[3] for r in chosen], trials, seed)
    overall = _summary(
        [f"{r[1]}/{r[2]}" for r in rows], [f"{r[1]}/{r[3]}" for r in rows], trials, seed
    )
    organ_mean = float(np.mean([v["balanced_accuracy"] for v in per_organ.values()]))
    return {
        "per_organ": per_organ,
        "overall": overall,
        "organ_mean": organ_mean,
        "predictions": rows,
    }


@torch.no_grad()
def zero_shot_patches(
    patch_features: torch.Tensor,
    labels: Sequence[int] | np.ndarray,
    class_prompts: Sequence[str],
    encode_text: TextEncoder,
    *,
    trials: int = 1000,
    seed: int = 0,
) -> dict[str, float]:
    """Patch-level zero-shot: ``argmax_k cos(v, c_k)``; balanced accuracy and macro AUROC.

    patch_features ``[N, D]``, labels ``[N]`` class indices into ``class_prompts``.
    Returns balanced_accuracy, balanced_accuracy_std, auroc, auroc_std (AUROC is one-vs-rest
    on the cosine scores, averaged over the classes present; binary tasks use class 1).
    """
    classes = F.normalize(encode_text(list(class_prompts)).float().cpu(), dim=-1)
    scores = (F.normalize(patch_features.float().cpu(), dim=-1) @ classes.T).numpy()
    y = np.asarray(labels)
    predictions = scores.argmax(1)
    result = {
        "balanced_accuracy": balanced_accuracy(y, predictions),
        "balanced_accuracy_std": bootstrap_std(
            balanced_accuracy, y, predictions, trials=trials, seed=seed
        ),
    }
    auroc_scores = scores[:, 1] - scores[:, 0] if scores.shape[1] == 2 else scores
    result["auroc"] = macro_auroc(y, auroc_scores)
    result["auroc_std"] = bootstrap_std(macro_auroc, y, auroc_scores, trials=trials, seed=seed)
    return result
