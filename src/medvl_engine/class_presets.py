"""Class prompts for zero-shot slide classification (LIMIT Eq. 5), by organ.

The presets follow the paper's zero-shot tasks: the SPIDER-C unified classes per organ
(Tumor, Stroma, Inflammation, Necrosis, Epithelium, Vascular, Fat; plus Nerve and Skin
adnexa for skin, Mucin for colorectal) and the CAMELYON16 lymph-node categories of its
Fig. 2, each with the tissue type prepended (the CPath convention the paper follows).
Plain data with no torch, so the classification dock lists them on the GUI thread.
"""

from __future__ import annotations

from medvl_engine.errors import ConfigError

__all__ = ["CLASS_PRESETS", "preset_prompts"]

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
