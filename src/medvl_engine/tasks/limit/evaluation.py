"""Pathology zero-shot evaluation: TCGA-OT-style slide classification and patch classification.

Slide level (LIMIT Sec. 3.3, Eq. 5; App. A.2): the choices of a slide are the classes of its
organ, each written as the prompt ``"<tissue> <class>"``; every prompt ``c_k`` pools the
slide's patches with report-guided attention and ``y = argmax_k cos(h_W(c_k), c_k)``.
Organs with a single diagnostic label are grouped into one category whose choices are all
of their (organ, class) pairs. Balanced accuracy is reported per category; the overall
score is the mean of the table rows (the paper's "average balanced accuracy across all
organs"; with ``report_organs`` the largest organs are rows and the rest one "other" row,
as in Table 2, whose TCGA-OT overall is the mean of its 8 rows), each with a 1,000-trial
bootstrap std. The random pooling baseline is the mean
over 10 seeded trials of randomly selected patches (Sec. 4.5). A template/synonym report
scores every (template, cancer synonym) pair (Fig. 3, Table A4).
Patch level: ``y = argmax_k cos(v, c_k)``; balanced accuracy and one-vs-rest AUROC.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.evaluation.metrics import balanced_accuracy, bootstrap_std, macro_auroc
from medvl_engine.models.limit import PoolingMethod, pool_patches

__all__ = [
    "SlideExample",
    "choice_categories",
    "organ_mean_bootstrap",
    "random_patch_pool",
    "score_zero_shot",
    "slide_class_scores",
    "synonym_class_names",
    "patch_template_synonym_robustness",
    "template_synonym_robustness",
    "zero_shot_predictions",
    "zero_shot_slides",
    "zero_shot_patches",
    "DEFAULT_TEMPLATE",
    "SINGLE_LABEL_GROUP",
    "OTHER_ROW",
    "table_weights",
]

DEFAULT_TEMPLATE = "{tissue} {class}"
SINGLE_LABEL_GROUP = "single-label organs"
OTHER_ROW = "other"
TextEncoder = Callable[[list[str]], torch.Tensor]
Option = tuple[str, str]  # (organ, class)


@dataclasses.dataclass
class SlideExample:
    """One evaluation slide: patch features ``[M, D]``, its organ and its true class name."""

    features: torch.Tensor
    organ: str
    label: str
    slide_id: str = ""


def choice_categories(
    classes_by_organ: Mapping[str, Sequence[str]],
    group_single_label: bool = True,
    group_name: str = SINGLE_LABEL_GROUP,
) -> dict[str, list[Option]]:
    """The multiple-choice categories: category -> its options ``(organ, class)``.

    Each organ with two or more classes is its own category. With ``group_single_label``
    the organs that have a single class are merged into one category ``group_name`` whose
    choices are all their (organ, class) pairs (LIMIT App. A.2: TCGA-OT bladder, prostate,
    cervix and the rest); without it each stays a one-choice category.
    """
    categories: dict[str, list[Option]] = {}
    singles: list[Option] = []
    for organ, classes in classes_by_organ.items():
        options = [(organ, name) for name in dict.fromkeys(classes)]
        if group_single_label and len(options) == 1:
            singles.extend(options)
        elif options:
            categories[organ] = options
    if singles:
        if group_name in categories:
            raise ValueError(
                f"the group of single-label organs is named {group_name!r}, like an organ "
                "with several classes; choose another group name."
            )
        categories[group_name] = singles
    return categories


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


def table_weights(
    sizes: Mapping[str, int],
    report_organs: int | None,
    single_label_group: str = SINGLE_LABEL_GROUP,
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """The rows of the per-organ table and each category's weight in the overall mean.

    sizes: slides per category. With ``report_organs = N`` the N organs with the most
    slides (ties by name; never the group of single-label organs) are rows of their own
    and the rest are averaged into one row ``"other"`` (LIMIT App. A.2: 7 organs and
    "Other", macro-averaged); overall is the mean of the rows, so each category weighs
    ``1 / rows`` or ``1 / (rows * len(other))``. ``None``: every category is a row.
    Returns ``({row: [categories]}, {category: weight})``.
    """
    organs = sorted((c for c in sizes if c != single_label_group), key=lambda c: (-sizes[c], c))
    if report_organs is None:
        table = {c: [c] for c in sorted(sizes)}
    else:
        if report_organs < 0:
            raise ValueError(f"the number of organs to report must be >= 0, got {report_organs}")
        top = sorted(organs[:report_organs])
        rest = sorted(c for c in sizes if c not in top)
        if len(rest) == 1:
            top, rest = sorted([*top, *rest]), []
        table = {c: [c] for c in top}
        if rest:
            table[OTHER_ROW] = rest
    weights = {c: 1 / (len(table) * len(members)) for members in table.values() for c in members}
    return table, weights


def organ_mean_bootstrap(
    groups: Sequence[tuple[np.ndarray, np.ndarray]],
    trials: int = 1000,
    seed: int = 0,
    weights: Sequence[float] | None = None,
) -> np.ndarray:
    """Organ-mean balanced accuracy of ``trials`` resamples, ``[trials]``.

    groups: ``(labels, predictions)`` of each category; weights: each category's weight
    (default: equal). Slides are resampled with replacement within each category, so
    every resample keeps every category.
    """
    share = np.full(len(groups), 1 / len(groups)) if weights is None else np.asarray(weights)
    rng = np.random.default_rng(seed)
    values = np.empty(trials)
    for trial in range(trials):
        scores = []
        for labels, predictions in groups:
            rows = rng.integers(0, len(labels), size=len(labels))
            scores.append(balanced_accuracy(labels[rows], predictions[rows]))
        values[trial] = float(np.dot(share, scores))
    return values


def _key(option: Option) -> str:
    return f"{option[0]}/{option[1]}"


def _score_rows(
    rows: list[tuple[Any, ...]],
    choices: Mapping[str, int],
    trials: int,
    seed: int,
    report_organs: int | None,
    single_label_group: str,
) -> dict[str, Any]:
    """Per-category, table, organ-mean and pooled balanced accuracy of prediction rows."""
    per_organ: dict[str, dict[str, float]] = {}
    groups, names = [], []
    for category in sorted({row[1] for row in rows}):
        chosen = [row for row in rows if row[1] == category]
        y = np.asarray([_key((r[2], r[3])) for r in chosen], dtype=object)
        p = np.asarray([_key((r[4], r[5])) for r in chosen], dtype=object)
        per_organ[category] = {
            "balanced_accuracy": balanced_accuracy(y, p),
            "std": bootstrap_std(balanced_accuracy, y, p, trials=trials, seed=seed),
            "n": float(len(y)),
            "choices": float(choices[category]),
        }
        if choices[category] > 1:  # a one-choice category is right by construction
            groups.append((y, p))
            names.append(category)
    if not groups:
        raise ValueError("no category has two or more choices; zero-shot needs a choice to make")
    sizes = {name: len(y) for name, (y, _) in zip(names, groups, strict=True)}
    table, weights = table_weights(sizes, report_organs, single_label_group)
    accuracy = {name: per_organ[name]["balanced_accuracy"] for name in names}
    rows_of_table = {
        row: float(np.mean([accuracy[c] for c in members])) for row, members in table.items()
    }
    share = [weights[name] for name in names]
    values = organ_mean_bootstrap(groups, trials, seed, share)
    organ_mean = {
        "balanced_accuracy": float(np.mean(list(rows_of_table.values()))),
        "std": float(np.std(values)) if trials else float("nan"),
        "ci_low": float(np.percentile(values, 2.5)) if trials else float("nan"),
        "ci_high": float(np.percentile(values, 97.5)) if trials else float("nan"),
        "n": float(sum(len(y) for y, _ in groups)),
        "categories": float(len(groups)),
        "table": rows_of_table,
        "other": table.get(OTHER_ROW, []),
    }
    y = np.asarray([_key((r[2], r[3])) for r in rows], dtype=object)
    p = np.asarray([_key((r[4], r[5])) for r in rows], dtype=object)
    pooled = {
        "balanced_accuracy": balanced_accuracy(y, p),
        "std": bootstrap_std(balanced_accuracy, y, p, trials=trials, seed=seed),
        "n": float(len(y)),
    }
    return {"per_organ": per_organ, "organ_mean": organ_mean, "pooled": pooled}


def _over_trials(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over random-pooling trials of every balanced accuracy."""

    def summary(values: list[float], n: float, **extra: float) -> dict[str, Any]:
        return {
            "balanced_accuracy": float(np.mean(values)),
            "std": float(np.std(values)),
            "n": n,
            "trials": [float(v) for v in values],
            **extra,
        }

    first = results[0]
    per_organ = {
        category: summary(
            [r["per_organ"][category]["balanced_accuracy"] for r in results],
            value["n"],
            choices=value["choices"],
        )
        for category, value in first["per_organ"].items()
    }
    organ_mean = summary(
        [r["organ_mean"]["balanced_accuracy"] for r in results],
        first["organ_mean"]["n"],
        categories=first["organ_mean"]["categories"],
    )
    organ_mean["table"] = {
        row: float(np.mean([r["organ_mean"]["table"][row] for r in results]))
        for row in first["organ_mean"]["table"]
    }
    organ_mean["other"] = first["organ_mean"]["other"]
    pooled = summary([r["pooled"]["balanced_accuracy"] for r in results], first["pooled"]["n"])
    return {"per_organ": per_organ, "organ_mean": organ_mean, "pooled": pooled}


PredictionRow = tuple[Any, ...]  # (slide_id, category, organ, label, pred. organ, pred. class)


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


def score_zero_shot(
    trial_rows: Sequence[Sequence[PredictionRow]],
    classes_by_organ: Mapping[str, Sequence[str]],
    *,
    trials: int = 1000,
    seed: int = 0,
    overall: Literal["organ_mean", "pooled"] = "organ_mean",
    group_single_label: bool = True,
    single_label_group: str = SINGLE_LABEL_GROUP,
    report_organs: int | None = None,
) -> dict[str, Any]:
    """Balanced accuracies of prediction rows (:func:`zero_shot_predictions`), the dict of
    :func:`zero_shot_slides`. Several trials (random pooling): means over the trials and
    the std across them, no bootstrap."""
    if overall not in ("organ_mean", "pooled"):
        raise ValueError(f"overall must be 'organ_mean' or 'pooled', got {overall!r}")
    if not trial_rows:
        raise ValueError("random pooling needs at least one trial")
    categories = choice_categories(classes_by_organ, group_single_label, single_label_group)
    choices = {name: len(options) for name, options in categories.items()}
    bootstrap = 0 if len(trial_rows) > 1 else trials
    results = [
        _score_rows(list(rows), choices, bootstrap, seed, report_organs, single_label_group)
        for rows in trial_rows
    ]
    scored = _over_trials(results) if len(results) > 1 else results[0]
    chosen = dict(scored[overall], definition=overall)
    return {
        "per_organ": scored["per_organ"],
        "overall": chosen,
        "organ_mean": scored["organ_mean"]["balanced_accuracy"],
        "organ_mean_summary": scored["organ_mean"],
        "pooled": scored["pooled"],
        "categories": {
            name: [_key(o) for o in options]
            for name, options in categories.items()
            if name in scored["per_organ"]
        },
        "predictions": list(trial_rows[0]),
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
    class_names: Mapping[str, str] | None = None,
    pooling: PoolingMethod = "report_guided",
    k: int = 10,
    normalize_features: bool = True,
    trials: int = 1000,
    seed: int = 0,
    overall: Literal["organ_mean", "pooled"] = "organ_mean",
    group_single_label: bool = True,
    single_label_group: str = SINGLE_LABEL_GROUP,
    random_trials: int = 10,
    random_patches: int = 10,
    report_organs: int | None = None,
) -> dict[str, Any]:
    """Organ-restricted zero-shot slide classification (TCGA-OT protocol).

    classes_by_organ: the choices of each organ; template: prompt with ``{tissue}`` (the
    organ, or ``tissue_names[organ]``) and ``{class}`` (the class, or ``class_names[class]``);
    encode_text: texts -> ``[T, D]``. Single-label organs form one category
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
        template=template,
        tissue_names=tissue_names,
        class_names=class_names,
        pooling=pooling,
        k=k,
        normalize_features=normalize_features,
        seed=seed,
        group_single_label=group_single_label,
        single_label_group=single_label_group,
        random_trials=random_trials,
        random_patches=random_patches,
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


def synonym_class_names(
    class_names: Sequence[str], synonyms: Sequence[str], term: str
) -> dict[str, str]:
    """Each class name with every whole-word synonym (case-insensitive) replaced by ``term``.

    Classes that name no synonym keep their name. Longer synonyms are matched first, so
    "malignant neoplasm" is replaced as one phrase.
    """
    words = sorted((re.escape(s) for s in synonyms if s.strip()), key=len, reverse=True)
    if not words:
        return {name: name for name in class_names}
    pattern = re.compile(r"\b(?:" + "|".join(words) + r")\b", flags=re.IGNORECASE)
    return {name: pattern.sub(term, name) for name in class_names}


@torch.no_grad()
def template_synonym_robustness(
    slides: Sequence[SlideExample],
    classes_by_organ: Mapping[str, Sequence[str]],
    encode_text: TextEncoder,
    tau_attn: float,
    *,
    templates: Sequence[str],
    synonyms: Sequence[str],
    **options: Any,
) -> dict[str, Any]:
    """Zero-shot accuracy for every (template, synonym) pair (LIMIT Fig. 3, Table A4).

    Every class name that names one of ``synonyms`` as a whole word has it replaced by each
    synonym in turn (:func:`synonym_class_names`); each template is used with each term.
    When no class names a synonym only the templates vary (``terms == []``). ``options``
    go to :func:`zero_shot_slides` (no bootstrap: ``trials=0``).

    Returns ``{"pairs": [{"template", "term", "balanced_accuracy"}], "mean", "std",
    "median", "min", "max", "templates", "terms", "per_template": {template: {"mean",
    "std"}}}``; std is across pairs (``per_template`` across terms).
    """
    names = sorted({name for classes in classes_by_organ.values() for name in classes})
    tissue_names = options.get("tissue_names") or {}
    cached = _CachedEncoder(encode_text)
    cached.prefetch(
        template.format(**{"tissue": tissue_names.get(organ, organ), "class": renamed[name]})
        for template in templates
        for renamed in _renamings(names, synonyms)
        for organ, classes in classes_by_organ.items()
        for name in classes
    )

    def accuracy(template: str, renamed: Mapping[str, str] | None) -> float:
        result = zero_shot_slides(
            slides,
            classes_by_organ,
            cached,
            tau_attn,
            **{**options, "template": template, "class_names": renamed, "trials": 0},
        )
        return float(result["overall"]["balanced_accuracy"])

    return _robustness(names, templates, synonyms, accuracy)


class _CachedEncoder:
    """A text encoder that encodes each distinct prompt once, in batches."""

    def __init__(self, encode_text: TextEncoder, batch: int = 256) -> None:
        self.encode_text = encode_text
        self.batch = batch
        self.rows: dict[str, torch.Tensor] = {}

    def prefetch(self, texts: Iterable[str]) -> None:
        missing = [t for t in dict.fromkeys(texts) if t not in self.rows]
        for start in range(0, len(missing), self.batch):
            chunk = missing[start : start + self.batch]
            embedded = self.encode_text(chunk).float().cpu()
            self.rows.update(zip(chunk, embedded, strict=True))

    def __call__(self, texts: list[str]) -> torch.Tensor:
        self.prefetch(texts)
        return torch.stack([self.rows[t] for t in texts])


def _renamings(names: Sequence[str], synonyms: Sequence[str]) -> list[dict[str, str]]:
    """Class names under each synonym term (the names themselves when none matches)."""
    terms: list[str | None] = [*dict.fromkeys(synonyms)] or [None]
    renamed = [synonym_class_names(names, synonyms, t) if t else None for t in terms]
    return [r or {n: n for n in names} for r in renamed] + [{n: n for n in names}]


def _robustness(
    names: Sequence[str],
    templates: Sequence[str],
    synonyms: Sequence[str],
    accuracy: Callable[[str, Mapping[str, str] | None], float],
) -> dict[str, Any]:
    """Score ``accuracy(template, class_names)`` for every (template, term) pair; summary."""
    if not templates:
        raise ValueError("the robustness report needs at least one template")
    matching = any(synonym_class_names(names, synonyms, "\0")[n] != n for n in names)
    terms: list[str | None] = [*dict.fromkeys(synonyms)] if matching else []
    pairs: list[dict[str, Any]] = []
    for template in templates:
        for term in terms or [None]:
            renamed = synonym_class_names(names, synonyms, term) if term else None
            value = accuracy(template, renamed)
            pairs.append({"template": template, "term": term, "balanced_accuracy": value})
    values = np.asarray([p["balanced_accuracy"] for p in pairs])
    per_template = {}
    for template in templates:
        mine = [p["balanced_accuracy"] for p in pairs if p["template"] == template]
        per_template[template] = {"mean": float(np.mean(mine)), "std": float(np.std(mine))}
    return {
        "pairs": pairs,
        "mean": float(values.mean()),
        "std": float(values.std()),
        "median": float(np.median(values)),
        "min": float(values.min()),
        "max": float(values.max()),
        "templates": list(templates),
        "terms": terms,
        "per_template": per_template,
    }


@torch.no_grad()
def patch_template_synonym_robustness(
    patch_features: torch.Tensor,
    labels: Sequence[int] | np.ndarray,
    organs: Sequence[str],
    class_names: Sequence[str],
    encode_text: TextEncoder,
    *,
    templates: Sequence[str],
    synonyms: Sequence[str],
) -> dict[str, Any]:
    """Patch-level zero-shot balanced accuracy for every (template, synonym) pair (Fig. 3).

    patch_features ``[N, D]``; labels ``[N]`` indices into ``class_names``; organs ``[N]``
    the tissue of each patch, written into the template's ``{tissue}``. A patch is assigned
    ``argmax_k cos(v, c_k)`` over the prompts of every class for its tissue. Returns the
    summary of :func:`template_synonym_robustness`.
    """
    patches = F.normalize(patch_features.float().cpu(), dim=-1)
    y = np.asarray(labels)
    tissues = np.asarray(list(organs), dtype=object)
    if not (len(y) == len(tissues) == len(patches)):
        raise ValueError("patch features, labels and organs must have the same length")

    cached = _CachedEncoder(encode_text)
    cached.prefetch(
        template.format(**{"tissue": tissue, "class": renamed[name]})
        for template in templates
        for renamed in _renamings(list(class_names), synonyms)
        for tissue in sorted(set(tissues.tolist()))
        for name in class_names
    )

    def accuracy(template: str, renamed: Mapping[str, str] | None) -> float:
        predictions = np.empty(len(y), dtype=np.int64)
        for tissue in sorted(set(tissues.tolist())):
            rows = np.flatnonzero(tissues == tissue)
            prompts = [
                template.format(**{"tissue": tissue, "class": (renamed or {}).get(c, c)})
                for c in class_names
            ]
            classes = F.normalize(cached(prompts), dim=-1)
            predictions[rows] = (patches[rows] @ classes.T).argmax(1).numpy()
        return balanced_accuracy(y, predictions)

    return _robustness(list(class_names), templates, synonyms, accuracy)


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
