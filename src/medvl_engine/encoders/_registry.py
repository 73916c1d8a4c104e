"""Resolve a registry name, model folder or Hugging Face id to a :class:`PatchTextEncoder`.

Dispatch is by exact registry key or by the ``model_type`` in a folder's config.json,
never by matching parts of a name. Every architecture is medvl's own code (or a transformers
class chosen here); nothing a model folder ships is ever imported (see :mod:`._folder_checks`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from medvl_engine.encoders._base import PatchTextEncoder
from medvl_engine.encoders._folder_checks import read_config, refuse_code
from medvl_engine.errors import ModelNotFoundError, UnsupportedFormatError

__all__ = ["RegistryEntry", "available_encoders", "load_encoder", "register_model_type"]

FolderLoader = Callable[[Path, dict[str, Any], str, torch.device], PatchTextEncoder]


@dataclass(frozen=True)
class RegistryEntry:
    """A named model: its adapter ``model_type`` and where its weights come from."""

    name: str
    model_type: str
    source: str | None  # Hugging Face id; None for models built locally
    description: str
    how_to_get: str = ""


_ENTRIES: dict[str, RegistryEntry] = {
    entry.name: entry
    for entry in (
        RegistryEntry(
            "medvl-demo",
            "medvl-demo",
            None,
            "offline demo: handcrafted H&E descriptors + MiniLM text tower (shipped; "
            "synthetic data, not for diagnosis)",
        ),
        RegistryEntry(
            "plip",
            "clip",
            "vinid/plip",
            "PLIP (CLIP ViT-B/32 tuned on OpenPath)",
            "download it with `huggingface-cli download vinid/plip` while online",
        ),
        RegistryEntry(
            "quiltnet",
            "clip",
            "wisdomik/QuiltNet-B-32",
            "QuiltNet (CLIP ViT-B/32 tuned on Quilt-1M)",
            "download it with `huggingface-cli download wisdomik/QuiltNet-B-32` while online",
        ),
        RegistryEntry(
            "openai-clip",
            "clip",
            "openai/clip-vit-base-patch16",
            "OpenAI CLIP ViT-B/16",
            "download it with `huggingface-cli download openai/clip-vit-base-patch16` while online",
        ),
        RegistryEntry(
            "conch-v1",
            "conch-v1",
            "MahmoodLab/CONCH",
            "CONCH v1 (needs the `conch` package)",
            "request access on huggingface.co/MahmoodLab/CONCH, log in, then "
            "`huggingface-cli download MahmoodLab/CONCH`",
        ),
        RegistryEntry(
            "conch-v1.5",
            "conch-v1.5",
            "MahmoodLab/TITAN",
            "CONCH v1.5 vision tower (features only)",
            "request access on huggingface.co/MahmoodLab/TITAN, log in, then "
            "`huggingface-cli download MahmoodLab/TITAN`",
        ),
    )
}

_FOLDER_LOADERS: dict[str, FolderLoader] = {}


def register_model_type(model_type: str, loader: FolderLoader) -> None:
    """Add an adapter: ``loader(folder, config, name, device)`` for folders of this model_type."""
    _FOLDER_LOADERS[model_type] = loader


def available_encoders() -> list[RegistryEntry]:
    """The named models ``load_encoder`` knows, in registry order."""
    return list(_ENTRIES.values())


def load_encoder(
    name_or_path: str | Path, device: str | torch.device = "cpu", model_type: str | None = None
) -> PatchTextEncoder:
    """Load a patch vision-language encoder.

    ``name_or_path`` is a registry name (see :func:`available_encoders`), a model folder whose
    config.json names its ``model_type``, or a Hugging Face id. ``model_type`` overrides the
    folder's (needed for checkpoints without a config.json, e.g. a CONCH ``pytorch_model.bin``).
    Offline (HF_HUB_OFFLINE=1) a model that is not on disk raises ModelNotFoundError at once.
    """
    from medvl_engine.encoders._hub import resolve_model_dir

    device = torch.device(device)
    name = str(name_or_path)
    entry = _ENTRIES.get(name)
    if entry is not None:
        if entry.model_type == "medvl-demo" and model_type in (None, "medvl-demo"):
            from medvl_engine.encoders._demo import load_shipped_demo

            return load_shipped_demo(name, device)
        folder = resolve_model_dir(entry.source or name, entry.how_to_get)
        return _load_folder(folder, name, device, model_type or entry.model_type)
    path = Path(name).expanduser()
    if path.is_file():
        if model_type is None:
            raise ModelNotFoundError(
                f"Model file {path} has no config.json beside it to say what it is; pass its "
                f"model type (one of {sorted(_FOLDER_LOADERS)}) or the folder of a checkpoint.",
                path,
            )
        return _load_folder(path, name, device, model_type)
    if not path.is_dir() and name.count("/") != 1:
        known = ", ".join(_ENTRIES)
        raise ModelNotFoundError(
            f"Model '{name}' is not a registered name ({known}), a model folder on disk or a "
            "Hugging Face id (owner/name); check the spelling or give the folder's path."
        )
    return _load_folder(resolve_model_dir(name), name, device, model_type)


def _load_folder(
    folder: Path, name: str, device: torch.device, model_type: str | None
) -> PatchTextEncoder:
    config = read_config(folder, required=False) if folder.is_dir() else {}
    model_type = model_type or config.get("model_type")
    if model_type is None:
        if folder.is_dir():
            refuse_code(folder, config)
        raise UnsupportedFormatError(
            f'Model folder {folder} has no config.json with a "model_type"; pass the model type '
            f"(one of {sorted(_FOLDER_LOADERS)}) explicitly.",
            folder,
        )
    loader = _FOLDER_LOADERS.get(model_type)
    if loader is None:
        if folder.is_dir():
            refuse_code(folder, config)  # a type medvl does not implement that ships its own code
        raise UnsupportedFormatError(
            f"Model {name} has model_type '{model_type}', which medvl cannot load; supported types "
            f"are {', '.join(sorted(_FOLDER_LOADERS))}.",
            folder,
        )
    return loader(folder, config, name, device)


def _load_clip(folder: Path, config: dict, name: str, device: torch.device) -> PatchTextEncoder:
    from medvl_engine.encoders._clip import load_clip_folder

    return load_clip_folder(folder, name=name, device=device)


def _load_demo(folder: Path, config: dict, name: str, device: torch.device) -> PatchTextEncoder:
    from medvl_engine.encoders._demo import load_demo_folder

    return load_demo_folder(folder, config, name=name, device=device)


def _load_paired(folder: Path, config: dict, name: str, device: torch.device) -> PatchTextEncoder:
    from medvl_engine.encoders._paired import load_paired_folder

    return load_paired_folder(
        folder, config, name=name, device=device, load_vision=lambda n, d: load_encoder(n, d)
    )


def _load_conch_v1(folder: Path, config: dict, name: str, device: torch.device) -> PatchTextEncoder:
    from medvl_engine.encoders._conch import load_conch_v1

    return load_conch_v1(folder, name=name, device=device)


def _load_conch_v15(
    folder: Path, config: dict, name: str, device: torch.device
) -> PatchTextEncoder:
    from medvl_engine.encoders._conch import load_conch_v15

    return load_conch_v15(folder, name=name, device=device)


register_model_type("clip", _load_clip)
register_model_type("medvl-demo", _load_demo)
register_model_type("medvl-text-tower", _load_paired)
register_model_type("conch-v1", _load_conch_v1)
register_model_type("conch-v1.5", _load_conch_v15)
register_model_type("titan", _load_conch_v15)  # a MahmoodLab/TITAN snapshot: its CONCH v1.5 tower
