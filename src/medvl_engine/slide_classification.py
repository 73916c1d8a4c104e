"""Zero-shot slide classification with its explanation: class scores and attention maps.

LIMIT Eq. 1-2 and 5. Patch features v_i [N, D] (L2-normalised, as the feature store holds
them) and class embeddings c_k [K, D] (normalised mean of a class's prompt embeddings):

    alpha_ki = softmax_i(v_i . c_k / tau_attn)          (report-guided attention, [K, N])
    h_W(c_k) = sum_i alpha_ki v_i                        (class-conditioned slide embedding)
    score_k  = cos(h_W(c_k), c_k),   y = argmax_k score_k

The scores are exactly :func:`medvl_engine.heatmap.classify_slide`'s; what this module adds
is alpha, the patches each class's answer rests on, placed on the slide as a Heatmap of
``alpha_ki * N`` (1 = the weight every patch would get under uniform attention).

The class presets (``CLASS_PRESETS``, ``preset_prompts``) live in the torch-free
:mod:`medvl_engine.prompts` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from medvl_engine.errors import ConfigError, DataError
from medvl_engine.prompts import CLASS_PRESETS, preset_prompts

if TYPE_CHECKING:
    from medvl_engine.features import FeatureStore
    from medvl_engine.heatmap import Heatmap, PromptEncoder

__all__ = [
    "CLASS_PRESETS",
    "SlideClassification",
    "attention_heatmap",
    "classify_with_attention",
    "model_tau_attn",
    "preset_prompts",
    "values_heatmap",
]

DEFAULT_TAU_ATTN = 0.05


def model_tau_attn(model: str) -> float:
    """tau_attn recorded in a LIMIT-trained model folder's config.json, else 0.05 (LIMIT's)."""
    import json
    from pathlib import Path

    config = Path(model) / "config.json"
    try:
        if config.is_file():
            value = float(json.loads(config.read_text()).get("tau_attn", DEFAULT_TAU_ATTN))
            return value if value > 0 else DEFAULT_TAU_ATTN
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return DEFAULT_TAU_ATTN


@dataclass
class SlideClassification:
    """Class names in the order given, their scores [K], attention [K, N] and tau_attn."""

    names: list[str]
    scores: np.ndarray
    attention: np.ndarray
    tau_attn: float

    @property
    def ranked(self) -> list[tuple[str, float]]:
        """(class, score) best first (ties keep the given order)."""
        order = np.argsort(-self.scores, kind="stable")
        return [(self.names[i], float(self.scores[i])) for i in order]

    @property
    def predicted(self) -> str:
        """Eq. 5: the class of highest score."""
        return self.ranked[0][0]


def classify_with_attention(
    store: FeatureStore,
    encoder: PromptEncoder,
    class_prompts: Sequence[str] | Mapping[str, Sequence[str]],
    tau_attn: float = 0.05,
) -> SlideClassification:
    """Scores and attention of each class over the store's patches (see the module docstring).

    ``class_prompts``: class names used as prompts, or name -> its prompts (averaged).
    """
    from medvl_engine.heatmap import class_embeddings
    from medvl_engine.models.limit import report_guided_pool

    if tau_attn <= 0:
        raise ConfigError(f"the attention temperature must be positive, got {tau_attn}.")
    with torch.no_grad():
        names, classes = class_embeddings(store, encoder, class_prompts)  # [K, D]
        features = store.torch_features  # [N, D]
        pooled, attention = report_guided_pool(
            features, classes.to(features.dtype), tau_attn, return_attention=True
        )  # [K, D], [K, N]
        scores = torch.nn.functional.cosine_similarity(pooled.float(), classes.float(), dim=-1)
    return SlideClassification(
        names=names,
        scores=scores.numpy().astype(np.float64),
        attention=attention.float().numpy(),
        tau_attn=float(tau_attn),
    )


def attention_heatmap(
    store: FeatureStore, classification: SlideClassification, name: str
) -> Heatmap:
    """The attention of class ``name`` as a Heatmap of ``alpha_i * N`` on the store's grid.

    ``value_range`` is (0, max), ``prompt`` the class name, ``mode`` "attention".
    """
    if name not in classification.names:
        raise ConfigError(f"{name!r} is not one of the classified classes.")
    index = classification.names.index(name)
    relative = classification.attention[index] * classification.attention.shape[1]  # [N]
    heatmap = values_heatmap(store, relative, name, mode="attention")
    heatmap.metadata.update(
        {"tau_attn": classification.tau_attn, "unit": "alpha x N (1 = uniform attention)"}
    )
    return heatmap


def values_heatmap(store: FeatureStore, values: np.ndarray, label: str, mode: str) -> Heatmap:
    """Per-patch ``values`` [N] (store order) as a Heatmap on the store's grid.

    Placed like the prompt heatmaps (:func:`medvl_engine.heatmap.similarity_map`): one cell
    per stride step, micrometres when the store has an mpp; ``value_range`` is (min(0, low),
    high) of the finite values.
    """
    from medvl_engine.heatmap import place_scores

    values = np.asarray(values, dtype=np.float32).reshape(-1)
    if values.shape[0] != store.n_patches:
        raise DataError(
            f"Got {values.shape[0]} values for a feature store of {store.n_patches} patches."
        )
    finite = values[np.isfinite(values)]
    low = min(0.0, float(finite.min())) if finite.size else 0.0
    high = float(finite.max()) if finite.size else 1.0
    return place_scores(
        store,
        values,
        mode=mode,
        normalize="none",
        prompt=label,
        value_range=(low, high if high > low else low + 1.0),
    )
