"""Patch vision-language encoders behind one interface, chosen by a registry.

encoder = load_encoder("medvl-demo")          # or "plip", a model folder, a Hugging Face id
v = encoder.encode_patches(patches_uint8)     # [B, H, W, 3] -> [B, D], L2-normalised
t = encoder.encode_text(["tumor", "stroma"])  # [T, D] in the same space
"""

from medvl_engine.encoders._base import PatchTextEncoder
from medvl_engine.encoders._conch import TextTowerUnavailableError
from medvl_engine.encoders._paired import PAIRED_MODEL_TYPE, save_text_tower_folder
from medvl_engine.encoders._preprocess import ImagePreprocess
from medvl_engine.encoders._registry import load_encoder, register_model_type
from medvl_engine.encoders._text_tower import TextTower, load_text_tower
from medvl_engine.encoders.resolve import RegistryEntry, available_encoders

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
