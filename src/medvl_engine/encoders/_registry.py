"""Load a :class:`PatchTextEncoder` of the kind that :func:`.resolve.resolve_encoder` finds
for a registry name, model folder or Hugging Face id.

Dispatch is by the resolved ``model_type`` (a registry entry's or a folder's config.json),
never by matching parts of a name. Every architecture is medvl's own code (or a transformers
class chosen here); nothing a model folder ships is ever imported (see :mod:`._folder_checks`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from medvl_engine.encoders.base import PatchTextEncoder
from medvl_engine.encoders.folder_checks import read_config, refuse_code
from medvl_engine.encoders.resolve import resolve_encoder
from medvl_engine.errors import ModelNotFoundError, UnsupportedFormatError

__all__ = ["load_encoder", "register_model_type"]

FolderLoader = Callable[[Path, dict[str, Any], str, torch.device], PatchTextEncoder]


_FOLDER_LOADERS: dict[str, FolderLoader] = {}


def register_model_type(model_type: str, loader: FolderLoader) -> None:
    """Add an adapter: ``loader(folder, config, name, device)`` for folders of this model_type."""
    _FOLDER_LOADERS[model_type] = loader


def load_encoder(
    name_or_path: str | Path, device: str | torch.device = "cpu", model_type: str | None = None
) -> PatchTextEncoder:
    """Load a patch vision-language encoder.

    ``name_or_path`` is a registry name (see :func:`available_encoders`), a model folder whose
    config.json names its ``model_type``, or a Hugging Face id. ``model_type`` overrides the
    folder's (needed for checkpoints without a config.json, e.g. a CONCH ``pytorch_model.bin``).
    Offline (HF_HUB_OFFLINE=1) a model that is not on disk raises ModelNotFoundError at once.
    """
    device = torch.device(device)
    resolved = resolve_encoder(name_or_path, model_type)
    if resolved.shipped:
        from medvl_engine.encoders.demo import load_shipped_demo

        return load_shipped_demo(resolved.name, device)
    if resolved.kind is None and resolved.path.is_file():
        raise ModelNotFoundError(
            f"Model file {resolved.path} has no config.json beside it to say what it is; pass "
            f"its model type (one of {sorted(_FOLDER_LOADERS)}) or the folder of a checkpoint.",
            resolved.path,
        )
    return _load_folder(resolved.path, resolved.name, device, resolved.kind)


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


def _load_clip(
    folder: Path, config: dict[str, Any], name: str, device: torch.device
) -> PatchTextEncoder:
    from medvl_engine.encoders._clip import load_clip_folder

    return load_clip_folder(folder, name=name, device=device)


def _load_demo(
    folder: Path, config: dict[str, Any], name: str, device: torch.device
) -> PatchTextEncoder:
    from medvl_engine.encoders.demo import load_demo_folder

    return load_demo_folder(folder, config, name=name, device=device)


def _load_paired(
    folder: Path, config: dict[str, Any], name: str, device: torch.device
) -> PatchTextEncoder:
    from medvl_engine.encoders._paired import load_paired_folder

    return load_paired_folder(
        folder, config, name=name, device=device, load_vision=lambda n, d: load_encoder(n, d)
    )


def _load_conch_v1(
    folder: Path, config: dict[str, Any], name: str, device: torch.device
) -> PatchTextEncoder:
    from medvl_engine.encoders.conch import load_conch_v1

    return load_conch_v1(folder, name=name, device=device)


def _load_conch_v15(
    folder: Path, config: dict[str, Any], name: str, device: torch.device
) -> PatchTextEncoder:
    from medvl_engine.encoders.conch import load_conch_v15

    return load_conch_v15(folder, name=name, device=device)


register_model_type("clip", _load_clip)
register_model_type("medvl-demo", _load_demo)
register_model_type("medvl-text-tower", _load_paired)
register_model_type("conch-v1", _load_conch_v1)
register_model_type("conch-v1.5", _load_conch_v15)
register_model_type("titan", _load_conch_v15)  # a MahmoodLab/TITAN snapshot: its CONCH v1.5 tower
