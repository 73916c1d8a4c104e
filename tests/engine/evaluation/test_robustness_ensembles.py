"""The LIMIT template x synonym robustness report scores each pair with the prompt-ensemble
definition of medvl_engine.prompts, and its numbers are those it gave before."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from medvl_engine.data.limit_prompt_variants import CANCER_SYNONYMS, ROBUSTNESS_TEMPLATES
from medvl_engine.prompts import ensemble_embeddings
from medvl_engine.tasks.limit.evaluation import (
    SlideExample,
    patch_template_synonym_robustness,
    template_synonym_robustness,
)
from medvl_engine.tasks.limit.evaluation import robustness as robustness_module
from medvl_engine.tasks.limit.evaluation import slides as slides_module
from medvl_engine.tasks.limit.evaluation.robustness import class_template, pair_class_embeddings

D = 8
CLASSES = {"breast": ["tumor", "fat", "stroma"], "lung": ["lung carcinoma", "fat"]}
PATCH_CLASSES = ["tumor", "fat", "stroma"]


def encode(texts: list[str]) -> torch.Tensor:
    """A fixed random vector of a random length per text (so normalising matters)."""
    rows = []
    for text in texts:
        rng = np.random.default_rng(zlib.crc32(text.encode()))
        rows.append(rng.normal(size=D) * (0.5 + 3 * rng.random()))
    return torch.tensor(np.array(rows), dtype=torch.float32)


def _slides() -> list[SlideExample]:
    generator = torch.Generator().manual_seed(3)
    pairs = [(organ, name) for organ, names in CLASSES.items() for name in names] * 4
    return [
        SlideExample(torch.randn(6, D, generator=generator), organ, label, f"s{i}")
        for i, (organ, label) in enumerate(pairs)
    ]


def _patches() -> tuple[torch.Tensor, list[int], list[str]]:
    generator = torch.Generator().manual_seed(3)
    for _ in range(len(_slides())):  # the same stream as the slides', then the patches
        torch.randn(6, D, generator=generator)
    features = torch.randn(40, D, generator=generator)
    return features, [i % 3 for i in range(40)], ["breast" if i % 2 else "lung" for i in range(40)]


def _slide_report() -> dict:
    return template_synonym_robustness(
        _slides(),
        CLASSES,
        encode,
        0.05,
        templates=ROBUSTNESS_TEMPLATES,
        synonyms=CANCER_SYNONYMS,
    )


def _patch_report() -> dict:
    features, labels, organs = _patches()
    return patch_template_synonym_robustness(
        features,
        labels,
        organs,
        PATCH_CLASSES,
        encode,
        templates=ROBUSTNESS_TEMPLATES,
        synonyms=CANCER_SYNONYMS,
    )


def test_class_template_puts_the_term_where_the_template_has_its_class():
    for template in (*ROBUSTNESS_TEMPLATES, "{class} {{x}} of {tissue}"):
        for term in ("carcinoma", "malignant neoplasm"):
            expected = template.format(**{"tissue": "lung", "class": term})
            assert class_template(template, "lung").format(term) == expected


def test_a_one_pair_ensemble_is_what_the_slide_report_scores(monkeypatch):
    scored: list[torch.Tensor] = []
    real = slides_module.slide_class_scores

    def spy(features, class_embeddings, *args, **kwargs):
        scored.append(class_embeddings.clone())
        return real(features, class_embeddings, *args, **kwargs)

    monkeypatch.setattr(slides_module, "slide_class_scores", spy)
    _slide_report()
    # the first pair is (template 0, "cancer"); the first slide is a breast slide, whose
    # choices are the breast classes (each organ here is its own category)
    template = ROBUSTNESS_TEMPLATES[0]
    assert CANCER_SYNONYMS[0] == "cancer"
    terms = ["cancer", "fat", "stroma"]
    one_pair = pair_class_embeddings(encode, template, "breast", terms)
    assert torch.equal(scored[0], one_pair)
    prompts = [template.format(**{"tissue": "breast", "class": term}) for term in terms]
    assert torch.equal(
        one_pair,
        ensemble_embeddings(encode, {str(k): (p,) for k, p in enumerate(prompts)}, None),
    )
    naive = torch.nn.functional.normalize(encode(prompts), dim=-1)
    torch.testing.assert_close(scored[0], naive)
    # a lung slide scores the lung classes, "lung carcinoma" renamed to "lung cancer"
    lung = pair_class_embeddings(encode, template, "lung", ["lung cancer", "fat"])
    assert any(s.shape == lung.shape and torch.equal(s, lung) for s in scored)


def test_a_one_pair_ensemble_is_what_the_patch_report_scores(monkeypatch):
    scored: list[torch.Tensor] = []
    real = robustness_module._patch_predictions

    def spy(patches, classes):
        scored.append(classes.clone())
        return real(patches, classes)

    monkeypatch.setattr(robustness_module, "_patch_predictions", spy)
    _patch_report()
    # pair (template 1, "carcinoma"), tissues in sorted order: breast, lung
    index = (1 * len(CANCER_SYNONYMS) + CANCER_SYNONYMS.index("carcinoma")) * 2 + 1
    template = ROBUSTNESS_TEMPLATES[1]
    terms = ["carcinoma", "fat", "stroma"]
    one_pair = ensemble_embeddings(
        encode,
        {name: (term,) for name, term in zip(PATCH_CLASSES, terms, strict=True)},
        [class_template(template, "lung")],
    )
    assert torch.equal(scored[index], one_pair)
    assert len(scored) == len(ROBUSTNESS_TEMPLATES) * len(CANCER_SYNONYMS) * 2


def test_the_reports_numbers_are_unchanged():
    slide_report, patch_report = _slide_report(), _patch_report()
    assert [p["balanced_accuracy"] for p in slide_report["pairs"]] == pytest.approx(
        [0.6875, 0.60416667, 0.52083333, 0.58333333, 0.70833333, 0.52083333, 0.39583333,
         0.35416667, 0.4375, 0.45833333, 0.5625, 0.52083333, 0.52083333, 0.375, 0.375],
        abs=1e-8,
    )  # fmt: skip
    assert (slide_report["mean"], slide_report["std"]) == pytest.approx(
        (0.5083333333333333, 0.10644725697977625), abs=1e-12
    )
    assert [p["balanced_accuracy"] for p in patch_report["pairs"]] == pytest.approx(
        [0.32234432, 0.32417582, 0.37545788, 0.4010989, 0.34981685, 0.25091575, 0.27289377,
         0.24908425, 0.27289377, 0.25091575, 0.37728938, 0.27655678, 0.2985348, 0.32600733,
         0.37362637],
        abs=1e-8,
    )  # fmt: skip
    assert (patch_report["mean"], patch_report["std"]) == pytest.approx(
        (0.3147741147741147, 0.05013931164823298), abs=1e-12
    )
