"""Patch vision-language encoders behind one interface, chosen by a registry.

encoder = load_encoder("medvl-demo")          # or "plip", a model folder, a Hugging Face id
v = encoder.encode_patches(patches_uint8)     # [B, H, W, 3] -> [B, D], L2-normalised
t = encoder.encode_text(["tumor", "stroma"])  # [T, D] in the same space

Importing this package loads no torch: each public name is imported from its module when it
is first used, so the torch-free ``medvl_engine.encoders.resolve`` (model names, folders,
config.json reads) serves the viewer's GUI thread without pulling torch in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from medvl_engine.encoders._paired import PAIRED_MODEL_TYPE, save_text_tower_folder
    from medvl_engine.encoders._preprocess import ImagePreprocess
    from medvl_engine.encoders._registry import load_encoder, register_model_type
    from medvl_engine.encoders.base import PatchTextEncoder
    from medvl_engine.encoders.conch import TextTowerUnavailableError
    from medvl_engine.encoders.resolve import RegistryEntry, available_encoders
    from medvl_engine.encoders.text_tower import TextTower, load_text_tower

_MODULE_OF = {
    "PAIRED_MODEL_TYPE": "_paired",
    "ImagePreprocess": "_preprocess",
    "PatchTextEncoder": "base",
    "RegistryEntry": "resolve",
    "TextTower": "text_tower",
    "TextTowerUnavailableError": "conch",
    "available_encoders": "resolve",
    "load_encoder": "_registry",
    "load_text_tower": "text_tower",
    "register_model_type": "_registry",
    "save_text_tower_folder": "_paired",
}

__all__ = [
    "PAIRED_MODEL_TYPE",
    "ImagePreprocess",
    "PatchTextEncoder",
    "RegistryEntry",
    "TextTower",
    "TextTowerUnavailableError",
    "available_encoders",
    "load_encoder",
    "load_text_tower",
    "register_model_type",
    "save_text_tower_folder",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
