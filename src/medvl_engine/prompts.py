"""Prompts: the heatmap modes, the prompts each takes, the map's label, and class presets per organ.

One definition for the ``medvl heatmap`` command and the viewer's heatmap dock. With v_i the
normalised patch features and t_k the normalised prompt embeddings
(:mod:`medvl_engine.heatmap` computes the scores, T the softmax temperature):
    cosine    one prompt t              s_i = v_i . t                        "tumor"
    softmax   K >= 2 classes t_0..t_K-1  s_i = softmax_k(v_i . t_k / T)[0]   "tumor vs stroma, fat"
    contrast  two prompts, A then B     s_i = v_i . t_A - v_i . t_B          "tumor - stroma"
A softmax map is the probability of the first class among the candidates given (LIMIT Eq. 5
chooses among a candidate set), so its label names every class it was weighed against.
The ways a map's scores may be normalised for display (``NORMALIZATIONS``) are named here too.
Nothing here imports torch: the CLI builds its parser from ``MODES`` and the viewer's dock its
choices without loading a model.

The class presets for zero-shot slide classification (LIMIT Eq. 5) follow the paper's zero-shot
tasks: the SPIDER-C unified classes per organ (Tumor, Stroma, Inflammation, Necrosis, Epithelium,
Vascular, Fat; plus Nerve and Skin adnexa for skin, Mucin for colorectal) and the CAMELYON16
lymph-node categories of its Fig. 2, each with the tissue type prepended (the CPath convention).
"""

from __future__ import annotations

from collections.abc import Sequence

from medvl_engine.errors import ConfigError

__all__ = [
    "CLASS_PRESETS",
    "MODES",
    "NORMALIZATIONS",
    "check_prompts",
    "preset_prompts",
    "prompt_label",
]

MODES = ("cosine", "softmax", "contrast")
NORMALIZATIONS = ("none", "percentile", "minmax", "fixed")  # see heatmap.normalize_scores


def check_prompts(prompts: Sequence[str], mode: str) -> None:
    """Refuse prompts that ``mode`` cannot score, with one sentence (:class:`ConfigError`).

    See the module docstring for the count each mode takes; no prompt may be blank.
    """
    if mode not in MODES:
        raise ConfigError(f"Heatmap mode {mode!r} is not one of {', '.join(MODES)}.")
    count = len(prompts)
    blank = [number for number, prompt in enumerate(prompts, 1) if not prompt.strip()]
    if len(blank) == count:
        raise ConfigError("The prompt is empty: type what to look for, e.g. 'tumor'.")
    if blank:
        raise ConfigError(f"Prompt {blank[0]} of {count} is empty: give every prompt some text.")
    if mode == "cosine" and count != 1:
        raise ConfigError(
            f"Cosine mode scores one prompt, got {count}: use softmax to compare classes "
            "or contrast for A minus B."
        )
    if mode == "softmax" and count < 2:
        raise ConfigError(
            "Softmax mode needs two or more prompts (the classes; the first one is mapped), got 1."
        )
    if mode == "contrast" and count != 2:
        raise ConfigError(f"Contrast mode needs exactly two prompts (A minus B), got {count}.")


def prompt_label(prompts: Sequence[str], mode: str) -> str:
    """The name of the map ``prompts`` give in ``mode``, for layer names, colour-bar titles
    and exports: "tumor", "tumor vs stroma, fat" or "tumor - stroma".

    Raises :class:`ConfigError` for prompts :func:`check_prompts` refuses.
    """
    check_prompts(prompts, mode)
    if mode == "softmax":
        return f"{prompts[0]} vs " + ", ".join(prompts[1:])
    if mode == "contrast":
        return f"{prompts[0]} - {prompts[1]}"
    return prompts[0]


_SPIDER_C = ("tumor", "stroma", "inflammation", "necrosis", "epithelium", "vascular", "fat")

CLASS_PRESETS: dict[str, tuple[str, ...]] = {
    "breast (SPIDER-C)": tuple(f"breast {name}" for name in _SPIDER_C),
    "colorectal (SPIDER-C)": tuple(f"colorectal {name}" for name in (*_SPIDER_C, "mucin")),
    "skin (SPIDER-C)": tuple(f"skin {name}" for name in (*_SPIDER_C, "nerve", "adnexa")),
    "thorax (SPIDER-C)": tuple(f"thorax {name}" for name in _SPIDER_C),
    "lymph node (CAMELYON16)": (
        "lymph node metastasis",
        "lymph node adipose tissue",
        "lymph node lymphocytes",
    ),
    "synthetic demo slide": ("tumor", "stroma", "adipose"),
}
"""Preset name -> class prompts (one prompt per class)."""


def preset_prompts(name: str) -> tuple[str, ...]:
    """The class prompts of preset ``name``; a ConfigError naming the presets otherwise."""
    if name not in CLASS_PRESETS:
        raise ConfigError(
            f"{name!r} is not a class preset; use one of: {', '.join(CLASS_PRESETS)}."
        )
    return CLASS_PRESETS[name]
