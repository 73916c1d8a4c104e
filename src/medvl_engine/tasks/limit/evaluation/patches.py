"""Patch-level zero-shot classification: ``y = argmax_k cos(v, c_k)``; balanced accuracy and
one-vs-rest AUROC with bootstrap std."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.evaluation.metrics import balanced_accuracy, bootstrap_std, macro_auroc
from medvl_engine.tasks.limit.evaluation.slides import TextEncoder

__all__ = ["zero_shot_patches"]


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
