"""Which models a user can pick: registry names and model folders found on disk.

Two families: ``"topksiglip"`` (mammography,
:func:`medvl_engine.models.topksiglip_folder.load_topksiglip`)
and ``"encoder"`` (pathology patch/text encoders, :func:`medvl_engine.encoders.load_encoder`).
Names and folders come from :mod:`medvl_engine.encoders.resolve` (imported on first use, so
importing this module loads no torch); folders are found by their
``config.json`` ``model_type`` (never by their name) in the cache's
``models/`` folder and in ``runs/<run>/best`` (what ``medvl-train`` saves), two levels deep
at most, so listing stays a handful of small file reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ModelChoice", "list_models", "topk_candidates"]

FAMILIES = ("topksiglip", "encoder")
_MAX_FOLDERS = 200


@dataclass(frozen=True)
class ModelChoice:
    """One entry of a model list: what to show and what to pass to the loader."""

    label: str
    value: str
    registered: bool


def _folders_on_disk(root: Path) -> list[Path]:
    """Model folder candidates: ``models/*``, ``models/*/*``, ``runs/*/best``, ``runs/*/*/best``."""
    found: list[Path] = []
    for pattern in ("models/*", "models/*/*", "runs/*/best", "runs/*/*/best"):
        try:
            found.extend(sorted(path for path in root.glob(pattern) if path.is_dir()))
        except OSError:
            continue
        if len(found) >= _MAX_FOLDERS:
            break
    return found[:_MAX_FOLDERS]


def _belongs(family: str, model_type: str | None) -> bool:
    from medvl_engine.encoders.resolve import TOPKSIGLIP_MODEL_TYPE

    if model_type is None:
        return False
    return (model_type == TOPKSIGLIP_MODEL_TYPE) == (family == "topksiglip")


def list_models(family: str, cache: Path | None = None) -> list[ModelChoice]:
    """Registry names first (in registry order), then folders on disk of the same family.

    ``cache`` defaults to :func:`medvl_engine.common.cache.cache_dir`. A registered model whose
    folder sits in the cache is listed once, by its name.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    from medvl_engine.common.cache import cache_dir
    from medvl_engine.encoders.resolve import (
        available_encoders,
        named_topksiglip_models,
        read_model_type,
    )

    root = Path(cache) if cache is not None else cache_dir()
    choices: list[ModelChoice] = []
    registered_folders: set[Path] = set()
    if family == "topksiglip":
        for name, folder in named_topksiglip_models().items():
            choices.append(ModelChoice(name, name, True))
            registered_folders.add(folder.resolve())
    else:
        for entry in available_encoders():
            choices.append(ModelChoice(entry.name, entry.name, True))
    for folder in _folders_on_disk(root):
        if folder.resolve() in registered_folders or not _belongs(family, read_model_type(folder)):
            continue
        try:
            label = str(folder.relative_to(root))
        except ValueError:
            label = str(folder)
        choices.append(ModelChoice(label, str(folder), False))
    return choices


def topk_candidates(name_or_path: str | Path) -> int | None:
    """Candidate patches N = grid^2 of a TopKSigLIP model, read from its config.json.

    None when the model cannot be found or its config does not say (the loader then gives
    the reason when the model is used). Reads one small JSON file and imports no torch, so
    the TopK dock can call it on the GUI thread.
    """
    from medvl_engine.encoders.resolve import (
        TOPKSIGLIP_GRID,
        TOPKSIGLIP_MODEL_TYPE,
        read_model_type,
        resolve_topksiglip,
    )

    try:
        folder = resolve_topksiglip(name_or_path).path
    except Exception:  # not found: the loader names the problem when the model is run
        return None
    if read_model_type(folder) != TOPKSIGLIP_MODEL_TYPE:
        return None
    try:
        values = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        grid = int(values.get("grid", TOPKSIGLIP_GRID))
    except (OSError, ValueError, TypeError):
        return None
    return grid * grid if grid > 0 else None
