"""The prompts each heatmap mode takes and the label of its map (medvl_engine.prompts)."""

from __future__ import annotations

import re

import pytest

from medvl_engine.errors import ConfigError
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
