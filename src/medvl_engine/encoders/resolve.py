"""The one place that turns a model name or path into a folder on disk and says what it holds.

Every model kind goes through here: pathology patch/text encoders (:func:`resolve_encoder`),
trainable text towers (the same names and folders) and TopKSigLIP folders
(:func:`resolve_topksiglip`). A model's kind is the ``model_type`` of its config.json (or of
its registry entry), never a guess from its name. Nothing here builds a model: the loaders of
each kind take the :class:`ResolvedModel` from here.

Where a name is looked up, in order:

- encoders: a registry name (``medvl-demo`` is shipped inside the package, the others are
  Hugging Face snapshots), a checkpoint file or folder on disk, a Hugging Face id;
- TopKSigLIP: a folder on disk, the shipped demo's name (``topksiglip-demo``), a name that a
  training run's ``install_as`` filled under ``<MEDVL_CACHE>/models/<name>``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from medvl_engine.errors import ModelNotFoundError

__all__ = [
    "DEMO_TOPKSIGLIP",
    "TOPKSIGLIP_GRID",
    "TOPKSIGLIP_MODEL_TYPE",
    "RegistryEntry",
    "ResolvedModel",
    "available_encoders",
    "model_kind_on_disk",
    "named_topksiglip_models",
    "read_model_type",
    "registered_model_dir",
    "resolve_encoder",
    "resolve_topksiglip",
]

TOPKSIGLIP_MODEL_TYPE = "medvl-topksiglip"
"""The ``model_type`` in the config.json of a TopKSigLIP folder."""

TOPKSIGLIP_GRID = 16
"""The paper's candidate grid G (N = G * G patches): a TopKSigLIP config's default, here so
that reading a folder's candidate count needs no torch."""

DEMO_TOPKSIGLIP = "topksiglip-demo"
"""The shipped TopKSigLIP demo model (medvl_engine.demo_models): no training, no network."""

_CONFIG_NAME = "config.json"
_WEIGHTS_NAME = "model.safetensors"
_MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model is and what it is.

    path: the model folder (or a checkpoint file given without a folder);
    kind: its ``model_type`` (config.json, the registry entry, or what the caller said), None
    when nothing says; name: what the user gave (a registry name, a path or a Hugging Face id);
    shipped: True for a registered model that is built from the package, not from ``path``.
    """

    path: Path
    kind: str | None
    name: str
    shipped: bool = False


def read_model_type(folder: str | Path) -> str | None:
    """The ``model_type`` string of ``folder/config.json``; None when the file is missing,
    larger than 1 MiB, not a JSON object or names no type (a cheap read for listings)."""
    config = Path(folder) / _CONFIG_NAME
    try:
        if not config.is_file() or config.stat().st_size > _MAX_CONFIG_BYTES:
            return None
        values = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = values.get("model_type") if isinstance(values, dict) else None
    return model_type if isinstance(model_type, str) else None


# -- pathology encoders and text towers ------------------------------------------------------


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


def available_encoders() -> list[RegistryEntry]:
    """The named models ``load_encoder`` knows, in registry order."""
    return list(_ENTRIES.values())


def resolve_encoder(name_or_path: str | Path, model_type: str | None = None) -> ResolvedModel:
    """The folder (or checkpoint file) and kind of a patch encoder or text tower.

    ``name_or_path`` is a registry name (:func:`medvl_engine.encoders.available_encoders`), a
    checkpoint file (its kind must come from ``model_type``), a model folder or a Hugging Face
    id (owner/name; a snapshot in the local cache, downloaded only when online). ``model_type``
    overrides the folder's or the entry's kind. Offline, a model not on disk raises
    ModelNotFoundError at once.
    """
    from medvl_engine.encoders._hub import resolve_model_dir

    name = str(name_or_path)
    entry = _ENTRIES.get(name)
    if entry is not None:
        if entry.model_type == "medvl-demo" and model_type in (None, "medvl-demo"):
            from medvl_engine.demo_models import SHIPPED_ROOT

            return ResolvedModel(SHIPPED_ROOT / name, "medvl-demo", name, shipped=True)
        folder = resolve_model_dir(entry.source or name, entry.how_to_get)
        return ResolvedModel(folder, model_type or entry.model_type, name)
    path = Path(name).expanduser()
    if path.is_file():  # a checkpoint file: only the caller can say its kind
        return ResolvedModel(path, model_type, name)
    if not path.is_dir() and name.count("/") != 1:
        known = ", ".join(_ENTRIES)
        raise ModelNotFoundError(
            f"Model '{name}' is not a registered name ({known}), a model folder on disk or a "
            "Hugging Face id (owner/name); check the spelling or give the folder's path."
        )
    folder = resolve_model_dir(name)
    return ResolvedModel(folder, model_type or _checked_model_type(folder), name)


CONCH_CHECKPOINT_SUFFIXES = (".bin", ".pt", ".pth")
"""File endings of a bare CONCH v1 checkpoint (a pickled state dict, no config.json)."""


def model_kind_on_disk(path: str | Path) -> str | None:
    """The kind of a model file or folder on disk, None when nothing says.

    A CONCH v1 checkpoint (a ``.bin``/``.pt``/``.pth`` file, or a folder holding
    ``pytorch_model.bin`` and no config.json) is ``"conch-v1"``; a folder with a config.json is
    its ``model_type`` (a malformed config.json is an error with one sentence).
    """
    path = Path(path).expanduser()
    if path.is_file():
        return "conch-v1" if path.suffix in CONCH_CHECKPOINT_SUFFIXES else None
    if (path / "pytorch_model.bin").is_file() and not (path / _CONFIG_NAME).is_file():
        return "conch-v1"
    return _checked_model_type(path)


def _checked_model_type(folder: Path) -> str | None:
    """The folder's model_type through the checked reader (a malformed config.json is an
    error with one sentence); None without a config.json."""
    from medvl_engine.encoders.folder_checks import read_config

    return read_config(folder, required=False).get("model_type") if folder.is_dir() else None


# -- TopKSigLIP folders ----------------------------------------------------------------------


def _shipped_topksiglip_folder() -> Path:
    from medvl_engine.demo_models import SHIPPED_ROOT

    return SHIPPED_ROOT / DEMO_TOPKSIGLIP


def named_topksiglip_models() -> dict[str, Path]:
    """Registered TopKSigLIP names and the folder each resolves to (the shipped demo)."""
    return {DEMO_TOPKSIGLIP: _shipped_topksiglip_folder()}


def registered_model_dir(name: str) -> Path:
    """Cache folder ``<MEDVL_CACHE>/models/<name>`` into which a run's ``install_as`` installs
    its final model (independent of the cwd). The shipped demo's name is refused: that model
    is rebuilt with ``make demo-models``, never replaced from a training run."""
    from medvl_engine.common.cache import cache_dir

    if name in named_topksiglip_models():
        raise ModelNotFoundError(
            f"{name} is the shipped demo model and cannot be installed over; give install_as "
            "another name, or rebuild the demo with `make demo-models`."
        )
    if not name or Path(name).name != name or name in (".", ".."):
        raise ModelNotFoundError(
            f"{name!r} is not a usable model name; give a plain name such as 'my-topksiglip'."
        )
    return cache_dir() / "models" / name


def resolve_topksiglip(name_or_path: str | Path) -> ResolvedModel:
    """Folder of a TopKSigLIP model given a path, the shipped demo's name, or a name installed
    by a run; ``kind`` is the folder's model_type (checked by the loader).

    ``topksiglip-demo`` resolves to the folder shipped inside the package (no training, no
    network); a missing shipped folder is an error naming ``make demo-models``. Another name
    resolves to ``<MEDVL_CACHE>/models/<name>`` when a run's ``install_as`` filled it.
    """
    path = Path(name_or_path)
    if path.is_dir():
        return ResolvedModel(path, read_model_type(path), str(name_or_path))
    name = str(name_or_path)
    if name == DEMO_TOPKSIGLIP:
        from medvl_engine.demo_models import shipped_model_dir

        folder = shipped_model_dir(DEMO_TOPKSIGLIP)
        if folder is None:
            raise ModelNotFoundError(
                f"the shipped demo model {DEMO_TOPKSIGLIP} is missing from "
                f"{_shipped_topksiglip_folder()}; rebuild it with `make demo-models` "
                f"(python -m medvl_engine.tasks.demo_models {DEMO_TOPKSIGLIP}).",
                _shipped_topksiglip_folder(),
            )
        return ResolvedModel(folder, read_model_type(folder), name, shipped=True)
    installed = None
    if name and Path(name).name == name and name not in (".", ".."):
        from medvl_engine.common.cache import cache_dir

        installed = cache_dir() / "models" / name
        if installed.is_dir():
            return ResolvedModel(installed, read_model_type(installed), name)
    hint = f" (nor as {installed}, where install_as puts a trained model)" if installed else ""
    raise ModelNotFoundError(
        f"TopKSigLIP model {name_or_path} was not found{hint}; pass a model folder holding "
        f"{_CONFIG_NAME} and {_WEIGHTS_NAME}, or {DEMO_TOPKSIGLIP}.",
        path,
    )
