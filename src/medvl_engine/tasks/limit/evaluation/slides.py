"""Organ-restricted zero-shot slide classification (LIMIT Sec. 3.3, Eq. 5; TCGA-OT protocol).

Every prompt ``c_k`` ("<tissue> <class>" for each choice of the slide's category) pools the
slide's patches ``[M, D]`` with report-guided attention (or mean, top-k, random pooling for
the baselines) and ``y = argmax_k cos(h_W(c_k), c_k)``. The random pooling baseline is the
mean over seeded trials of randomly selected patches (Sec. 4.5). Predictions are plain rows
(:data:`~medvl_engine.tasks.limit.evaluation.scoring.PredictionRow`) scored by
:func:`~medvl_engine.tasks.limit.evaluation.scoring.score_zero_shot`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict, Unpack

import torch
import torch.nn.functional as F

from medvl_engine.models.limit import PoolingMethod, pool_patches
from medvl_engine.tasks.limit.evaluation.scoring import (
    SINGLE_LABEL_GROUP,
    PredictionRow,
    choice_categories,
    score_zero_shot,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "PredictionSettings",
    "SlideExample",
    "TextEncoder",
    "random_patch_pool",
    "slide_class_scores",
    "zero_shot_predictions",
    "zero_shot_slides",
]

DEFAULT_TEMPLATE = "{tissue} {class}"
TextEncoder = Callable[[list[str]], torch.Tensor]  # texts -> [T, D]


class PredictionSettings(TypedDict, total=False):
    """Prompt and pooling settings of :func:`zero_shot_predictions`, which
    :func:`zero_shot_slides` passes on by keyword; one left out takes
    :func:`zero_shot_predictions`' default."""

    template: str
    tissue_names: Mapping[str, str] | None
    class_names: Mapping[str, str] | None
    pooling: PoolingMethod
    k: int
    normalize_features: bool
    random_trials: int
    random_patches: int


@dataclasses.dataclass
class SlideExample:
    """One evaluation slide: patch features ``[M, D]``, its organ and its true class name."""

    features: torch.Tensor
    organ: str
    label: str
    slide_id: str = ""


def random_patch_pool(
    features: torch.Tensor, count: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Mean of ``count`` patches drawn uniformly without replacement (all when fewer): ``[D]``."""
    if count < 1:
        raise ValueError(f"the number of random patches must be at least 1, got {count}")
    chosen = torch.randperm(features.shape[0], generator=generator)[:count]
    return features[chosen].mean(0)


def slide_class_scores(
    features: torch.Tensor,
    class_embeddings: torch.Tensor,
    tau_attn: float,
    pooling: PoolingMethod = "report_guided",
    k: int = 10,
    normalize_features: bool = True,
    generator: torch.Generator | None = None,
    random_patches: int = 10,
) -> torch.Tensor:
    """``cos(h_W(c_k), c_k)`` (Eq. 5): slide ``[M, D]``, classes ``[C, D]`` -> ``[C]``.

    ``random`` pooling is the mean of ``random_patches`` randomly selected patches, the same
    slide representation for every class.
    """
    patches = features.float()
    if normalize_features:
        patches = F.normalize(patches, dim=-1)
    classes = F.normalize(class_embeddings.float(), dim=-1)
    if pooling == "random":
        pooled = random_patch_pool(patches, random_patches, generator).expand_as(classes)
    else:
        pooled = pool_patches(patches, classes, pooling, tau_attn, None, k, generator)  # [C, D]
    return F.cosine_similarity(pooled, classes, dim=-1)


def _slide_generator(trial_seed: int, slide_seed: int) -> torch.Generator:
    """The random-pooling generator of one slide in one trial (independent of other slides)."""
    return torch.Generator().manual_seed((trial_seed * 1_000_003 + slide_seed) % 2**63)


@torch.no_grad()
def zero_shot_predictions(
    slides: Sequence[SlideExample],
    classes_by_organ: Mapping[str, Sequence[str]],
    encode_text: TextEncoder,
    tau_attn: float,
    *,
    template: str = DEFAULT_TEMPLATE,
    tissue_names: Mapping[str, str] | None = None,
    class_names: Mapping[str, str] | None = None,
    pooling: PoolingMethod = "report_guided",
    k: int = 10,
    normalize_features: bool = True,
    seed: int = 0,
    group_single_label: bool = True,
    single_label_group: str = SINGLE_LABEL_GROUP,
    random_trials: int = 10,
    random_patches: int = 10,
    slide_seeds: Sequence[int] | None = None,
) -> list[list[PredictionRow]]:
    """The prediction row of every slide, one list per trial (one trial unless ``random``).

    ``y = argmax_k cos(h_W(c_k), c_k)`` (Eq. 5) over the choices of the slide's category.
    Rows are small plain tuples ``(slide_id, category, organ, label, predicted_organ,
    predicted_label)``, so shards of the slides can be scored on different processes and
    their rows concatenated (:func:`score_zero_shot`). ``slide_seeds``: one integer per
    slide (e.g. its index in the whole evaluation set); with them each slide draws its
    random patches from its own generator, so the rows do not depend on how the slides
    are split; without them one generator per trial runs through the slides in order.
    """
    if slide_seeds is not None and len(slide_seeds) != len(slides):
        raise ValueError(f"{len(slide_seeds)} slide seeds for {len(slides)} slides")
    categories = choice_categories(classes_by_organ, group_single_label, single_label_group)
    category_of = {organ: name for name, options in categories.items() for organ, _ in options}
    for slide in slides:
        options = [
            c for o, c in categories.get(category_of.get(slide.organ, ""), []) if o == slide.organ
        ]
        if slide.label not in options:
            raise ValueError(
                f"slide {slide.slide_id or '?'} has label {slide.label!r}, not among the "
                f"choices of organ {slide.organ!r}: {options}"
            )
    embeddings: dict[str, torch.Tensor] = {}
    for name in sorted({category_of[s.organ] for s in slides}):
        prompts = [
            template.format(
                **{
                    "tissue": (tissue_names or {}).get(organ, organ),
                    "class": (class_names or {}).get(label, label),
                }
            )
            for organ, label in categories[name]
        ]
        embeddings[name] = encode_text(prompts).float().cpu()
    seeds = [seed + trial for trial in range(random_trials)] if pooling == "random" else [seed]
    if not seeds:
        raise ValueError("random pooling needs at least one trial")
    trial_rows = []
    for trial_seed in seeds:
        shared = torch.Generator().manual_seed(trial_seed)
        rows = []
        for index, slide in enumerate(slides):
            generator = (
                shared if slide_seeds is None else _slide_generator(trial_seed, slide_seeds[index])
            )
            category = category_of[slide.organ]
            scores = slide_class_scores(
                slide.features.cpu(),
                embeddings[category],
                tau_attn,
                pooling,
                k,
                normalize_features,
                generator,
                random_patches,
            )
            predicted = categories[category][int(scores.argmax())]
            rows.append((slide.slide_id, category, slide.organ, slide.label, *predicted))
        trial_rows.append(rows)
    return trial_rows


@torch.no_grad()
def zero_shot_slides(
    slides: Sequence[SlideExample],
    classes_by_organ: Mapping[str, Sequence[str]],
    encode_text: TextEncoder,
    tau_attn: float,
    *,
    trials: int = 1000,
    seed: int = 0,
    overall: Literal["organ_mean", "pooled"] = "organ_mean",
    group_single_label: bool = True,
    single_label_group: str = SINGLE_LABEL_GROUP,
    report_organs: int | None = None,
    **settings: Unpack[PredictionSettings],
) -> dict[str, Any]:
    """Organ-restricted zero-shot slide classification (TCGA-OT protocol).

    The prediction rows of :func:`zero_shot_predictions` (with ``seed``, the grouping and
    ``settings``), scored by :func:`score_zero_shot`. classes_by_organ: the choices of each
    organ; template: prompt with ``{tissue}`` (the organ, or ``tissue_names[organ]``) and
    ``{class}`` (the class, or ``class_names[class]``); encode_text: texts -> ``[T, D]``
    (slides: patch features ``[M, D]``). Single-label organs form one category
    (:func:`choice_categories`). ``random`` pooling runs ``random_trials`` seeded trials of
    ``random_patches`` random patches per slide; its numbers are means over the trials and
    its ``std`` the std across them (no bootstrap). ``report_organs = N`` keeps the N organs
    with the most slides as table rows and averages the rest into one row ``"other"``
    (:func:`table_weights`; the paper reports 7 and "Other").

    Returns ``{"per_organ": {category: {"balanced_accuracy", "std", "n", "choices"}},
    "overall": {...}, "organ_mean": float, "organ_mean_summary": {...}, "pooled": {...},
    "categories": {category: ["organ/class", ...]}, "predictions": [(slide_id, category,
    organ, label, predicted_organ, predicted_label), ...]}``. ``overall`` is the mean of the
    table rows (categories with two or more choices; ``organ_mean_summary["table"]``) with a
    bootstrap std and 95% interval (``ci_low``/``ci_high``) or, with ``overall="pooled"``,
    the balanced accuracy over (organ, class) pairs of all slides.
    """
    if overall not in ("organ_mean", "pooled"):
        raise ValueError(f"overall must be 'organ_mean' or 'pooled', got {overall!r}")
    trial_rows = zero_shot_predictions(
        slides,
        classes_by_organ,
        encode_text,
        tau_attn,
        seed=seed,
        group_single_label=group_single_label,
        single_label_group=single_label_group,
        **settings,
    )
    return score_zero_shot(
        trial_rows,
        classes_by_organ,
        trials=trials,
        seed=seed,
        overall=overall,
        group_single_label=group_single_label,
        single_label_group=single_label_group,
        report_organs=report_organs,
    )
