"""The prompts each heatmap mode takes and the label of its map (medvl_engine.prompts)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from medvl_engine.errors import ConfigError, MedVLError
from medvl_engine.prompts import check_prompts, prompt_label


@pytest.mark.parametrize(
    ("prompts", "mode", "label"),
    [
        (["tumor"], "cosine", "tumor"),
        (["invasive carcinoma"], "cosine", "invasive carcinoma"),
        (["tumor", "stroma"], "softmax", "tumor vs stroma"),
        (["tumor", "stroma", "fat"], "softmax", "tumor vs stroma, fat"),
        (["tumor", "stroma"], "contrast", "tumor - stroma"),
    ],
)
def test_accepted_prompts_are_named_after_what_the_map_shows(prompts, mode, label):
    check_prompts(prompts, mode)
    assert prompt_label(prompts, mode) == label
    assert prompt_label(tuple(prompts), mode) == label


@pytest.mark.parametrize(
    ("prompts", "mode", "sentence"),
    [
        ([], "cosine", "The prompt is empty: type what to look for, e.g. 'tumor'."),
        (["  "], "softmax", "The prompt is empty: type what to look for, e.g. 'tumor'."),
        (["tumor", " "], "contrast", "Prompt 2 of 2 is empty: give every prompt some text."),
        (
            ["tumor", "stroma"],
            "cosine",
            "Cosine mode scores one prompt, got 2: use softmax to compare classes or contrast "
            "for A minus B.",
        ),
        (
            ["tumor"],
            "softmax",
            "Softmax mode needs two or more prompts (the classes; the first one is mapped), got 1.",
        ),
        (["tumor"], "contrast", "Contrast mode needs exactly two prompts (A minus B), got 1."),
        (
            ["tumor", "stroma", "fat"],
            "contrast",
            "Contrast mode needs exactly two prompts (A minus B), got 3.",
        ),
        (["tumor"], "dice", "Heatmap mode 'dice' is not one of cosine, softmax, contrast."),
    ],
)
def test_refused_prompts_give_one_sentence_and_no_label(prompts, mode, sentence):
    with pytest.raises(ConfigError) as refused:
        check_prompts(prompts, mode)
    assert str(refused.value) == sentence
    with pytest.raises(ConfigError, match=f"^{re.escape(sentence)}$"):
        prompt_label(prompts, mode)


# ------------------------------------------------------------------ prompt ensembles


def test_conch_templates_put_every_name_in_every_template():
    from medvl_engine.prompts import CONCH_TEMPLATES, expand_classes

    assert len(CONCH_TEMPLATES) == 22 and "an H&E image of {}." in CONCH_TEMPLATES
    texts = expand_classes({"tumor": ("tumor", "carcinoma")}, CONCH_TEMPLATES[:2])
    assert texts == {
        "tumor": [
            "tumor.",
            "a photomicrograph showing tumor.",
            "carcinoma.",
            "a photomicrograph showing carcinoma.",
        ]
    }
    assert expand_classes({"tumor": ("tumor", "carcinoma")}, None) == {
        "tumor": ["tumor", "carcinoma"]
    }


def test_ensemble_is_the_renormalised_mean_of_normalised_embeddings():
    import torch

    from medvl_engine.prompts import ensemble_embeddings

    table = {
        "a.": torch.tensor([3.0, 0.0, 0.0]),
        "x a": torch.tensor([0.0, 2.0, 0.0]),
        "b.": torch.tensor([0.0, 0.0, 5.0]),
        "x b": torch.tensor([1.0, 0.0, 1.0]),
    }
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return torch.stack([table[t] for t in texts])

    got = ensemble_embeddings(encode, {"A": ("a",), "B": ("b",)}, ["{}.", "x {}"], batch_size=3)
    # naive reference, written from the equation: c = n(mean_t n(E(t)))
    inv = 1 / np.sqrt(2)
    expected_a = np.array([0.5, 0.5, 0.0]) / np.linalg.norm([0.5, 0.5, 0.0])
    expected_b = np.array([inv / 2, 0, 0.5 + inv / 2])
    expected_b /= np.linalg.norm(expected_b)
    np.testing.assert_allclose(got.numpy(), np.stack([expected_a, expected_b]), atol=1e-6)
    assert [len(c) for c in calls] == [3, 1]  # every distinct text once, in batches


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("tumor=tumour,carcinoma", ("tumor", ("tumor", "tumour", "carcinoma"))),
        ("  fat ", ("fat", ("fat",))),
        ("tumor=tumor, carcinoma", ("tumor", ("tumor", "carcinoma"))),
    ],
)
def test_a_class_option_names_the_class_and_its_synonyms(spec, expected):
    from medvl_engine.prompts import parse_class

    assert parse_class(spec) == expected


BRACES = "must hold exactly one {} where the class name goes, and no other brace."


@pytest.mark.parametrize(
    ("call", "sentence"),
    [
        (
            lambda p: p.parse_class("=tumour"),
            "Class '=tumour' has an empty name: write NAME or NAME=SYNONYM,...",
        ),
        (
            lambda p: p.parse_class("tumor=a,,b"),
            "Class 'tumor' has an empty synonym: separate synonyms by commas.",
        ),
        (
            lambda p: p.check_classes(["tumor"]),
            "Choosing among classes needs at least 2, got 1: add the tissue it should be told "
            "apart from.",
        ),
        (
            lambda p: p.check_classes(["tumor", " "]),
            "Class 2 of 2 has an empty name; name every class.",
        ),
        (
            lambda p: p.check_classes(["tumor", "tumor"]),
            "Two classes have the same name; give each class once.",
        ),
        (
            lambda p: p.check_templates(["an image of tumor."]),
            f"Template 1 ('an image of tumor.') {BRACES}",
        ),
        (lambda p: p.check_templates(["{} and {}"]), f"Template 1 ('{{}} and {{}}') {BRACES}"),
        (lambda p: p.check_templates(["{0} tissue"]), f"Template 1 ('{{0}} tissue') {BRACES}"),
        (
            lambda p: p.resolve_templates("chonch"),
            "Templates 'chonch' are neither a set (conch, none) nor an existing file.",
        ),
        (lambda p: p.preset_classes("liver"), None),
    ],
)
def test_bad_classes_and_templates_are_refused_with_one_sentence(call, sentence):
    import medvl_engine.prompts as prompts

    with pytest.raises(ConfigError) as refused:
        call(prompts)
    if sentence is not None:
        assert str(refused.value) == sentence
    assert "\n" not in str(refused.value)


def test_templates_files_are_read_as_lines_or_yaml_and_guarded(tmp_path):
    from medvl_engine.prompts import read_templates, resolve_templates

    lines = tmp_path / "t.txt"
    lines.write_text("# mine\nan H&E image of {}.\n\n{}, H&E.\n", encoding="utf-8")
    assert resolve_templates(lines) == ("an H&E image of {}.", "{}, H&E.")
    listed = tmp_path / "t.yaml"
    listed.write_text("templates:\n  - 'a slide of {}.'\n", encoding="utf-8")
    assert read_templates(listed) == ("a slide of {}.",)
    assert resolve_templates("none") is None and resolve_templates(None) is None
    assert len(resolve_templates("conch")) == 22
    bad = tmp_path / "bad.txt"
    bad.write_text("an image of tumor.\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^Template 1 in bad.txt .* exactly one \{\}"):
        read_templates(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("a: [1, 2]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="must hold a YAML list of template strings"):
        read_templates(wrong)
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        read_templates(binary)
    with pytest.raises(MedVLError):
        read_templates(tmp_path)  # a folder is not a templates file
    import os

    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    with pytest.raises(MedVLError):
        read_templates(fifo)  # refused from its stat, never opened (would block)


def test_presets_gain_synonyms_and_keep_their_class_names():
    from medvl_engine.prompts import CLASS_PRESETS, preset_classes

    for name, prompts in CLASS_PRESETS.items():
        classes = preset_classes(name)
        assert list(classes) == list(prompts)
        assert all(names[0] == cls for cls, names in classes.items())
    assert preset_classes("breast (SPIDER-C)")["breast tumor"] == (
        "breast tumor",
        "breast carcinoma",
        "breast malignant epithelium",
        "breast tumour",
    )
    assert "fat" in preset_classes("synthetic demo slide")["adipose"]
