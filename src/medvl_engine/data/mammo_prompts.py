"""TopKSigLIP zero-shot prompts (paper Tables 9-12) and prompt-based class probabilities.

Each task is a list of prompts, one per class; a class probability is the softmax over the
task's prompts of ``gamma * cos(z_v, z_t)``. Findings are four independent binary tasks with a
[negative, positive] pair each (Table 12).
"""

from __future__ import annotations

from typing import Protocol

import torch

__all__ = ["ZERO_SHOT_PROMPTS", "PromptModel", "zero_shot_logits", "zero_shot_probabilities"]


class PromptModel(Protocol):
    """What zero-shot readouts need of a model (``TopKSigLIP`` has it)."""

    def encode_text(self, texts: list[str]) -> torch.Tensor: ...

    @property
    def logit_scale(self) -> torch.Tensor: ...


_NO_FINDING = "No suspicious masses, calcifications or other abnormalities are seen."

# task -> (class names, prompts), in class order.
ZERO_SHOT_PROMPTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "density": (
        ("A", "B", "C", "D"),
        (
            "The breast is almost entirely fatty.",
            "The breast is scattered with fibroglandular densities.",
            "The breast is heterogeneously dense.",
            "The breast is extremely dense.",
        ),
    ),
    "birads": (
        ("1", "2", "3", "4", "5"),
        (
            "BIRADS 1: N \u2013 Negative",
            "BIRADS 2: B - Benign",
            "BIRADS 3: P \u2013 Probably benign",
            "BIRADS 4: S \u2013 Suspicious",
            "BIRADS 5: M - Highly suggestive of malignancy",
        ),
    ),
    "cancer": (
        ("negative", "positive"),
        (
            "No evidence of cancer from neither screening nor biopsy.",
            "Biopsy confirms the presence of cancer.",
        ),
    ),
    "mass": (("negative", "positive"), (_NO_FINDING, "there is a mass seen in the breast.")),
    "calcification": (
        ("negative", "positive"),
        (_NO_FINDING, "there are calcifications seen in the breast."),
    ),
    "architectural distortion": (
        ("negative", "positive"),
        (_NO_FINDING, "there is an architectural distortion seen in the breast."),
    ),
    "asymmetry": (
        ("negative", "positive"),
        (_NO_FINDING, "there is an asymmetry seen in the breast."),
    ),
}


@torch.no_grad()
def zero_shot_logits(model: PromptModel, image_embeddings: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{task: [B, classes]}`` logits ``gamma * z_v z_t^T`` for every task of the prompt table.

    model: anything with ``encode_text(list[str]) -> [T, C]`` (L2-normalised) and
    ``logit_scale``; image_embeddings: ``[B, C]`` L2-normalised.
    """
    tasks = list(ZERO_SHOT_PROMPTS)
    prompts = [p for task in tasks for p in ZERO_SHOT_PROMPTS[task][1]]
    unique = list(dict.fromkeys(prompts))
    text = model.encode_text(unique).to(image_embeddings.device, image_embeddings.dtype)
    index = {p: i for i, p in enumerate(unique)}
    scale = float(torch.as_tensor(model.logit_scale).detach())
    out = {}
    for task in tasks:
        rows = text[[index[p] for p in ZERO_SHOT_PROMPTS[task][1]]]
        out[task] = scale * image_embeddings @ rows.T
    return out


def zero_shot_probabilities(
    model: PromptModel, image_embeddings: torch.Tensor
) -> list[dict[str, dict[str, float]]]:
    """Per image: ``{task: {class: probability}}`` (softmax over each task's prompts)."""
    logits = zero_shot_logits(model, image_embeddings)
    results: list[dict[str, dict[str, float]]] = [{} for _ in range(image_embeddings.shape[0])]
    for task, values in logits.items():
        probs = torch.softmax(values.float(), dim=-1).cpu().tolist()
        names = ZERO_SHOT_PROMPTS[task][0]
        for row, p in zip(results, probs, strict=True):
            row[task] = dict(zip(names, p, strict=True))
    return results
