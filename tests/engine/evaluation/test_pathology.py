"""The LIMIT paper's slide-level evaluation protocol on small hand-built cases.

Organ-mean overall, single-label organs grouped into one category, random pooling as the
mean of seeded trials of randomly selected patches, and the template x synonym report;
every expected number is computed here from the definitions.
"""

from __future__ import annotations

import inspect
from collections import defaultdict

import numpy as np
import pytest
import torch

from medvl_engine.data.limit_prompt_variants import CANCER_SYNONYMS, ROBUSTNESS_TEMPLATES
from medvl_engine.evaluation.metrics import balanced_accuracy, bootstrap_std
from medvl_engine.tasks.limit.evaluation import (
    SlideExample,
    choice_categories,
    organ_mean_bootstrap,
    patch_template_synonym_robustness,
    random_patch_pool,
    score_zero_shot,
    synonym_class_names,
    table_weights,
    template_synonym_robustness,
    zero_shot_predictions,
    zero_shot_slides,
)
from medvl_engine.tasks.limit.evaluation.slides import PredictionSettings

PROMPT_DIMS = {
    "breast tumor": 0,
    "breast fat": 1,
    "lung tumor": 2,
    "lung fat": 3,
    "bladder urothelial carcinoma": 4,
    "prostate adenocarcinoma": 5,
    "breast stroma": 6,
}
CLASSES = {
    "breast": ["tumor", "fat", "stroma"],
    "lung": ["tumor", "fat"],
    "bladder": ["urothelial carcinoma"],
    "prostate": ["adenocarcinoma"],
}
# (organ, true class, prompt the slide looks like)
COHORT = [
    ("breast", "tumor", "breast tumor"),
    ("breast", "tumor", "breast tumor"),
    ("breast", "tumor", "breast fat"),
    ("breast", "fat", "breast fat"),
    ("breast", "stroma", "breast stroma"),
    ("lung", "tumor", "lung tumor"),
    ("lung", "fat", "lung tumor"),
    ("bladder", "urothelial carcinoma", "bladder urothelial carcinoma"),
    ("bladder", "urothelial carcinoma", "prostate adenocarcinoma"),
    ("prostate", "adenocarcinoma", "prostate adenocarcinoma"),
]


def _encode(seen: list[str] | None = None):
    def encode(texts: list[str]) -> torch.Tensor:
        if seen is not None:
            seen.extend(texts)
        return torch.eye(len(PROMPT_DIMS))[[PROMPT_DIMS[t] for t in texts]]

    return encode


def _slides() -> list[SlideExample]:
    slides = []
    for index, (organ, label, looks_like) in enumerate(COHORT):
        features = torch.zeros(5, len(PROMPT_DIMS))
        features[:, PROMPT_DIMS[looks_like]] = 1.0
        slides.append(SlideExample(features, organ, label, f"s{index}"))
    return slides


def _naive_balanced_accuracy(pairs: list[tuple[str, str]]) -> float:
    """Mean over true classes of the fraction predicted right, by counting."""
    right: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for truth, predicted in pairs:
        total[truth] += 1
        right[truth] += truth == predicted
    return sum(right[c] / total[c] for c in total) / len(total)


def _pairs(organs: set[str]) -> list[tuple[str, str]]:
    return [
        (f"{organ} {label}", looks_like) for organ, label, looks_like in COHORT if organ in organs
    ]


def test_single_label_organs_form_one_category_of_their_own_pairs():
    categories = choice_categories(CLASSES)
    assert categories == {
        "breast": [("breast", "tumor"), ("breast", "fat"), ("breast", "stroma")],
        "lung": [("lung", "tumor"), ("lung", "fat")],
        "single-label organs": [
            ("bladder", "urothelial carcinoma"),
            ("prostate", "adenocarcinoma"),
        ],
    }
    apart = choice_categories(CLASSES, group_single_label=False)
    assert (
        apart["bladder"] == [("bladder", "urothelial carcinoma")]
        and "single-label organs" not in apart
    )
    with pytest.raises(ValueError, match="like an organ with several classes"):
        choice_categories({**CLASSES, "single-label organs": ["a", "b"]})


def test_overall_is_the_mean_over_organs_with_single_label_organs_grouped():
    seen: list[str] = []
    result = zero_shot_slides(_slides(), CLASSES, _encode(seen), 0.05, trials=50)
    assert set(seen) == set(PROMPT_DIMS)  # grouped choices keep their own organ in the prompt
    breast = _naive_balanced_accuracy(_pairs({"breast"}))
    lung = _naive_balanced_accuracy(_pairs({"lung"}))
    other = _naive_balanced_accuracy(_pairs({"bladder", "prostate"}))
    assert (breast, lung, other) == pytest.approx((8 / 9, 0.5, 0.75))
    group = result["per_organ"]["single-label organs"]
    assert group["balanced_accuracy"] == pytest.approx(other)
    assert group["n"] == 3 and group["choices"] == 2
    assert result["overall"]["definition"] == "organ_mean"
    assert result["overall"]["balanced_accuracy"] == pytest.approx((breast + lung + other) / 3)
    assert result["organ_mean"] == pytest.approx((breast + lung + other) / 3)
    pooled = _naive_balanced_accuracy(_pairs(set(CLASSES)))
    assert result["pooled"]["balanced_accuracy"] == pytest.approx(pooled)
    assert pooled != pytest.approx(result["organ_mean"])  # the two definitions differ here
    assert result["overall"]["ci_low"] <= result["organ_mean"] <= result["overall"]["ci_high"]
    assert result["overall"]["std"] > 0
    wrong = [row[2:] for row in result["predictions"] if row[2:4] != row[4:]]
    assert wrong == [
        ("breast", "tumor", "breast", "fat"),
        ("lung", "fat", "lung", "tumor"),
        ("bladder", "urothelial carcinoma", "prostate", "adenocarcinoma"),
    ]
    as_pooled = zero_shot_slides(_slides(), CLASSES, _encode(), 0.05, trials=0, overall="pooled")
    assert as_pooled["overall"]["balanced_accuracy"] == pytest.approx(pooled)


def test_without_grouping_one_choice_organs_are_left_out_of_the_mean():
    result = zero_shot_slides(
        _slides(), CLASSES, _encode(), 0.05, trials=0, group_single_label=False
    )
    assert result["per_organ"]["bladder"] == pytest.approx(
        {"balanced_accuracy": 1.0, "std": np.nan, "n": 2.0, "choices": 1.0}, nan_ok=True
    )
    breast = _naive_balanced_accuracy(_pairs({"breast"}))
    lung = _naive_balanced_accuracy(_pairs({"lung"}))
    assert result["overall"]["balanced_accuracy"] == pytest.approx((breast + lung) / 2)
    assert result["organ_mean_summary"]["categories"] == 2


def test_table_keeps_the_largest_organs_and_averages_the_rest_into_other():
    # TCGA-OT (LIMIT Table 2, Conch-Z): 7 largest organs, then "Other"; overall = row mean
    reported = {
        "breast": 89.2,
        "lung": 74.2,
        "brain": 44.4,
        "kidney": 96.4,
        "thyroid": 82.9,
        "bowel": 74.7,
        "uterus": 82.1,
    }
    sizes = {organ: 1000 - 10 * index for index, organ in enumerate(reported)}
    sizes.update({"liver": 300, "skin": 400, "single-label organs": 1544})
    accuracy = {**reported, "liver": 80.0, "skin": 93.4, "single-label organs": 86.7}
    table, weights = table_weights(sizes, 7)
    assert table == {
        **{o: [o] for o in sorted(reported)},
        "other": sorted(set(sizes) - set(reported)),
    }
    assert sum(weights.values()) == pytest.approx(1.0)
    overall = sum(weights[c] * accuracy[c] for c in sizes)
    assert overall == pytest.approx((sum(reported.values()) + 86.7) / 8)
    assert round(overall, 1) == 78.8  # the paper's overall
    everything, equal = table_weights(sizes, None)
    assert len(everything) == 10 and set(equal.values()) == {0.1}
    one_left, _ = table_weights({"a": 5, "b": 4}, 1)
    assert one_left == {"a": ["a"], "b": ["b"]}  # a lone leftover keeps its own name


def test_overall_of_a_short_table_is_the_mean_of_its_rows():
    result = zero_shot_slides(_slides(), CLASSES, _encode(), 0.05, trials=30, report_organs=1)
    breast = _naive_balanced_accuracy(_pairs({"breast"}))
    lung = _naive_balanced_accuracy(_pairs({"lung"}))
    other = _naive_balanced_accuracy(_pairs({"bladder", "prostate"}))
    summary = result["organ_mean_summary"]
    assert summary["table"] == pytest.approx({"breast": breast, "other": (lung + other) / 2})
    assert summary["other"] == ["lung", "single-label organs"]
    assert result["overall"]["balanced_accuracy"] == pytest.approx(
        (breast + (lung + other) / 2) / 2
    )


def test_organ_mean_bootstrap_resamples_within_each_category():
    y1, p1 = np.array(["a", "a", "b", "b", "b"]), np.array(["a", "b", "b", "b", "a"])
    y2, p2 = np.array(["c", "d", "d"]), np.array(["c", "d", "c"])
    # one category: the same resamples as the plain bootstrap of its balanced accuracy
    one = organ_mean_bootstrap([(y1, p1)], trials=200, seed=3)
    assert np.std(one) == pytest.approx(
        bootstrap_std(balanced_accuracy, y1, p1, trials=200, seed=3)
    )
    # two categories: each trial draws rows of category 1, then of category 2
    rng = np.random.default_rng(5)
    naive = []
    for _ in range(100):
        rows1 = rng.integers(0, 5, size=5)
        rows2 = rng.integers(0, 3, size=3)
        first = _naive_balanced_accuracy(list(zip(y1[rows1], p1[rows1], strict=True)))
        second = _naive_balanced_accuracy(list(zip(y2[rows2], p2[rows2], strict=True)))
        naive.append((first + second) / 2)
    both = organ_mean_bootstrap([(y1, p1), (y2, p2)], trials=100, seed=5)
    np.testing.assert_allclose(both, naive)
    weighted = organ_mean_bootstrap([(y1, p1), (y2, p2)], trials=100, seed=5, weights=[0.25, 0.75])
    rng = np.random.default_rng(5)
    for value in weighted:
        rows1 = rng.integers(0, 5, size=5)
        rows2 = rng.integers(0, 3, size=3)
        first = _naive_balanced_accuracy(list(zip(y1[rows1], p1[rows1], strict=True)))
        second = _naive_balanced_accuracy(list(zip(y2[rows2], p2[rows2], strict=True)))
        assert value == pytest.approx(0.25 * first + 0.75 * second)
    perfect = organ_mean_bootstrap([(y1, y1), (y2, y2)], trials=20)
    assert (perfect == 1.0).all()


def test_random_patch_pool_draws_distinct_patches_uniformly():
    features = torch.eye(6)  # patch i is the unit vector e_i: 3 x the mean marks the chosen ones
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([3 * random_patch_pool(features, 3, generator) for _ in range(3000)])
    torch.testing.assert_close(draws, draws.round())  # each patch at most once per draw
    assert (draws.sum(1).round() == 3).all()
    frequency = draws.mean(0).numpy()  # every patch is in a draw with probability 3/6
    assert np.abs(frequency - 0.5).max() < 0.04
    torch.testing.assert_close(random_patch_pool(features, 50), features.mean(0))
    with pytest.raises(ValueError, match="at least 1"):
        random_patch_pool(features, 0)


def test_random_pooling_is_the_mean_of_seeded_trials_of_random_patches():
    # half the patches look like tumor, half like fat: one random patch decides each trial
    slides = []
    for index, label in enumerate(["tumor", "fat"] * 3):
        features = torch.zeros(4, len(PROMPT_DIMS))
        features[:2, PROMPT_DIMS["breast tumor"]] = 1.0
        features[2:, PROMPT_DIMS["breast fat"]] = 1.0
        slides.append(SlideExample(features, "breast", label, f"s{index}"))
    classes = {"breast": ["tumor", "fat"]}
    result = zero_shot_slides(
        slides, classes, _encode(), 0.05, pooling="random", random_patches=1, seed=11
    )
    trials = result["overall"]["trials"]
    assert len(trials) == 10
    assert result["overall"]["balanced_accuracy"] == pytest.approx(np.mean(trials))
    assert result["overall"]["std"] == pytest.approx(np.std(trials)) and np.std(trials) > 0
    # naive replay of each trial: generator seeded with seed + trial, slides in order
    for trial, value in enumerate(trials):
        generator = torch.Generator().manual_seed(11 + trial)
        pairs = []
        for slide in slides:
            patch = int(torch.randperm(4, generator=generator)[0])
            pairs.append((slide.label, "tumor" if patch < 2 else "fat"))
        assert value == pytest.approx(_naive_balanced_accuracy(pairs))
    again = zero_shot_slides(
        slides, classes, _encode(), 0.05, pooling="random", random_patches=1, seed=11
    )
    assert again["overall"]["trials"] == trials
    # all patches drawn: every trial is mean pooling, so the trials agree
    whole = zero_shot_slides(slides, classes, _encode(), 0.05, pooling="random", random_patches=4)
    mean = zero_shot_slides(slides, classes, _encode(), 0.05, pooling="mean", trials=0)
    assert whole["overall"]["std"] == 0.0
    assert whole["overall"]["balanced_accuracy"] == mean["overall"]["balanced_accuracy"]


def test_zero_shot_slides_is_the_score_of_the_predictions_with_every_setting():
    seen: list[str] = []

    def encode(texts: list[str]) -> torch.Tensor:  # any prompt: a fixed vector of its letters
        seen.extend(texts)
        codes = torch.tensor([sum(map(ord, t)) % 13 + 1.0 for t in texts])
        return torch.sin(codes[:, None] * torch.arange(1.0, len(PROMPT_DIMS) + 1))

    settings: PredictionSettings = {
        "template": "{class} in {tissue}",
        "tissue_names": {"lung": "pulmonary tissue"},
        "class_names": {"fat": "adipose"},
        "pooling": "random",
        "k": 2,
        "normalize_features": False,
        "random_trials": 3,
        "random_patches": 2,
    }
    result = zero_shot_slides(
        _slides(), CLASSES, encode, 0.05, seed=7, group_single_label=False, **settings
    )
    assert "adipose in pulmonary tissue" in seen
    rows = zero_shot_predictions(
        _slides(), CLASSES, encode, 0.05, seed=7, group_single_label=False, **settings
    )
    assert len(rows) == 3  # random_trials
    assert result == score_zero_shot(rows, CLASSES, seed=7, group_single_label=False)
    # the settings zero_shot_slides passes on are all of zero_shot_predictions' own, less the
    # three it shares with scoring and the per-slide seeds it never takes
    parameters = inspect.signature(zero_shot_predictions).parameters.values()
    own = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    shared = {"seed", "group_single_label", "single_label_group", "slide_seeds"}
    assert set(PredictionSettings.__optional_keys__) == set(own) - shared


def test_synonyms_replace_whole_words_only():
    names = ["tumor", "Malignant neoplasm of breast", "adenocarcinoma", "fat"]
    renamed = synonym_class_names(names, CANCER_SYNONYMS, "malignancy")
    assert renamed == {
        "tumor": "malignancy",
        "Malignant neoplasm of breast": "malignancy of breast",
        "adenocarcinoma": "adenocarcinoma",
        "fat": "fat",
    }
    assert CANCER_SYNONYMS == ("cancer", "tumor", "malignant neoplasm", "carcinoma", "malignancy")
    assert len(ROBUSTNESS_TEMPLATES) == 3


def _encode_by_words(
    seen: list[str], rules: list[tuple[tuple[str, ...], list[float]]], otherwise: list[float]
):
    """An encoder that records its prompts: the vector of the first rule whose words are all
    in the prompt, else ``otherwise``."""

    def encode(texts: list[str]) -> torch.Tensor:
        seen.extend(texts)
        rows = [
            next((v for words, v in rules if all(w in t for w in words)), otherwise) for t in texts
        ]
        return torch.tensor(rows)

    return encode


def test_robustness_scores_every_template_and_synonym_pair():
    seen: list[str] = []
    encode = _encode_by_words(
        seen,
        # "malignancy" points away from tumor slides
        [(("fat",), [0.0, 1.0, 0.0]), (("malignancy",), [-1.0, 0.0, 1.0])],
        [1.0, 0.0, 0.0],
    )

    def slide(dim: int, label: str) -> SlideExample:
        features = torch.zeros(3, 3)
        features[:, dim] = 1.0
        return SlideExample(features, "breast", label)

    slides = [slide(0, "tumor"), slide(0, "tumor"), slide(1, "fat")]
    report = template_synonym_robustness(
        slides,
        {"breast": ["tumor", "fat"]},
        encode,
        0.05,
        templates=ROBUSTNESS_TEMPLATES,
        synonyms=CANCER_SYNONYMS,
    )
    assert len(report["pairs"]) == 15 and report["terms"] == list(CANCER_SYNONYMS)
    expected = [0.5 if p["term"] == "malignancy" else 1.0 for p in report["pairs"]]
    assert [p["balanced_accuracy"] for p in report["pairs"]] == expected
    assert report["mean"] == pytest.approx(np.mean(expected))
    assert report["std"] == pytest.approx(np.std(expected))
    assert (report["median"], report["min"], report["max"]) == (1.0, 0.5, 1.0)
    template = ROBUSTNESS_TEMPLATES[0]
    assert report["per_template"][template]["mean"] == pytest.approx(0.9)
    assert template.format(**{"tissue": "breast", "class": "malignant neoplasm"}) in seen
    assert len(set(seen)) == 3 * (5 + 1)  # five tumor wordings and fat, per template
    no_match = template_synonym_robustness(
        slides[2:],
        {"breast": ["stroma", "fat"]},
        encode,
        0.05,
        templates=ROBUSTNESS_TEMPLATES,
        synonyms=CANCER_SYNONYMS,
    )
    assert no_match["terms"] == [] and len(no_match["pairs"]) == 3


def test_patch_robustness_scores_every_pair_with_each_patch_tissue():
    seen: list[str] = []
    encode = _encode_by_words(
        seen,
        # lung tumor patches go to fat with the wording "carcinoma"
        [(("fat",), [0.0, 1.0]), (("carcinoma", "lung"), [-1.0, 0.0])],
        [1.0, 0.0],
    )

    features = torch.tensor([[1.0, 0.1], [0.9, 0.0], [1.0, 0.2], [0.1, 1.0]])
    labels = [0, 0, 0, 1]  # tumor, tumor, tumor, fat
    organs = ["breast", "lung", "lung", "lung"]
    report = patch_template_synonym_robustness(
        features,
        labels,
        organs,
        ["tumor", "fat"],
        encode,
        templates=ROBUSTNESS_TEMPLATES[:2],
        synonyms=CANCER_SYNONYMS,
    )
    carcinoma_pairs = _naive_balanced_accuracy(
        [("tumor", "tumor"), ("tumor", "fat"), ("tumor", "fat"), ("fat", "fat")]
    )
    expected = [carcinoma_pairs if p["term"] == "carcinoma" else 1.0 for p in report["pairs"]]
    assert len(report["pairs"]) == 10
    assert [p["balanced_accuracy"] for p in report["pairs"]] == pytest.approx(expected)
    assert report["mean"] == pytest.approx(np.mean(expected))
    assert ROBUSTNESS_TEMPLATES[1].format(**{"tissue": "lung", "class": "carcinoma"}) in seen
    assert ROBUSTNESS_TEMPLATES[1].format(**{"tissue": "breast", "class": "fat"}) in seen
    with pytest.raises(ValueError, match="same length"):
        patch_template_synonym_robustness(
            features,
            labels,
            organs[:2],
            ["tumor", "fat"],
            encode,
            templates=["{class}"],
            synonyms=[],
        )
