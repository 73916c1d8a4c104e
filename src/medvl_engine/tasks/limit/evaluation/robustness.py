"""Prompt robustness: zero-shot accuracy over every (template, cancer synonym) pair (LIMIT
Fig. 3, Table A4), at slide level and at patch level.

Every class name that names one of the synonyms as a whole word has it replaced by each
synonym in turn (:func:`synonym_class_names`); each template is used with each term. The
report gives the mean, std, median and range over the pairs.

Each pair's class embedding is a one-name, one-template prompt ensemble of
:func:`medvl_engine.prompts.ensemble_embeddings` (the definition heatmap, classify and segment
use): with E the text tower and n(x) = x / ||x||, class k of tissue t under template u and
term s has c_k = n(n(E(u(t, s_k)))) [D] (:func:`pair_class_embeddings`), where
:func:`class_template` turns a ``{tissue}``/``{class}`` template into the ensemble's ``{}``
template for one tissue.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.evaluation.metrics import balanced_accuracy
from medvl_engine.prompts import ensemble_embeddings
from medvl_engine.tasks.limit.evaluation.slides import SlideExample, TextEncoder, zero_shot_slides

__all__ = [
    "class_template",
    "pair_class_embeddings",
    "patch_template_synonym_robustness",
    "synonym_class_names",
    "template_synonym_robustness",
]


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


def class_template(template: str, tissue: str) -> str:
    """``template`` (with ``{tissue}`` and ``{class}``) for one ``tissue``, as a prompt-ensemble
    template whose ``{}`` is the class: ``class_template(u, t).format(s) ==
    u.format(tissue=t, class=s)`` for every term s (any other brace is escaped)."""
    marker = "\0class\0"
    filled = template.format(**{"tissue": tissue, "class": marker})
    return filled.replace("{", "{{").replace("}", "}}").replace(marker, "{}")


def pair_class_embeddings(
    encode_text: TextEncoder, template: str, tissue: str, terms: Sequence[str]
) -> torch.Tensor:
    """The class embeddings of one (template, synonym) pair, float32 [K, D]: class k is the
    prompt ensemble (:func:`medvl_engine.prompts.ensemble_embeddings`) of the single name
    ``terms[k]`` in the single template :func:`class_template` (``template``, ``tissue``).
    ``encode_text``: T texts -> [T, D]."""
    classes = {str(k): (term,) for k, term in enumerate(terms)}
    return ensemble_embeddings(encode_text, classes, [class_template(template, tissue)])


class _PromptEnsembles:
    """A text encoder for :func:`zero_shot_slides` that returns each prompt's one-name
    ensemble (no template: the prompt already holds the pair's template, tissue and term)."""

    def __init__(self, encode_text: TextEncoder) -> None:
        self.encode_text = encode_text

    def __call__(self, texts: list[str]) -> torch.Tensor:
        classes = {str(k): (text,) for k, text in enumerate(texts)}
        return ensemble_embeddings(self.encode_text, classes, None)


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
    go to :func:`zero_shot_slides` (no bootstrap: ``trials=0``); each prompt it scores is a
    one-name prompt ensemble (module docstring).

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

    ensembles = _PromptEnsembles(cached)

    def accuracy(template: str, renamed: Mapping[str, str] | None) -> float:
        result = zero_shot_slides(
            slides,
            classes_by_organ,
            ensembles,
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
    ``argmax_k v . c_k`` with c_k the pair's class embeddings for its tissue
    (:func:`pair_class_embeddings`). Returns the summary of
    :func:`template_synonym_robustness`.
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
            terms = [(renamed or {}).get(c, c) for c in class_names]
            classes = pair_class_embeddings(cached, template, tissue, terms)
            predictions[rows] = _patch_predictions(patches[rows], classes)
        return balanced_accuracy(y, predictions)

    return _robustness(list(class_names), templates, synonyms, accuracy)


def _patch_predictions(patches: torch.Tensor, classes: torch.Tensor) -> np.ndarray:
    """argmax_k v_i . c_k: patches [N, D], class embeddings [K, D] -> int64 [N]."""
    return (patches @ classes.T).argmax(1).numpy()
