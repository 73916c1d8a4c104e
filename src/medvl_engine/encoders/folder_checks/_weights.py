"""A model folder's weights: model.safetensors only (pickles refused, except the published
checkpoints read tensors-only), checked for damage, NaN or infinity and degenerate
normalisation, and the sentence for weights that do not fit their config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch

from medvl_engine.errors import ModelNotFoundError, UnsafeModelError

__all__ = [
    "PICKLE_SUFFIXES",
    "WEIGHTS_NAME",
    "check_safetensors",
    "check_weights",
    "load_pickled_state_dict",
    "load_weights",
    "require_safetensors",
    "weights_mismatch",
]

WEIGHTS_NAME = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def require_safetensors(folder: Path) -> Path:
    """``folder/model.safetensors``; UnsafeModelError when the folder holds only pickled
    weights, ModelNotFoundError when it holds none."""
    path = folder / WEIGHTS_NAME
    if path.is_file():
        return path
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise UnsafeModelError(
            f"Model folder {folder} holds only pickled weights ({', '.join(pickles[:3])}), which "
            "medvl does not load because unpickling can run code; convert them to "
            "model.safetensors with the tool that made them.",
            folder / pickles[0],
        )
    raise ModelNotFoundError(
        f"Model folder {folder} has no {WEIGHTS_NAME}; download or save the model again.", folder
    )


def _damaged_weights(path: Path) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"{path} is truncated or damaged (its tensors cannot be read); download or save the "
        "model again.",
        path,
    )


def check_safetensors(path: Path) -> None:
    """Check a safetensors file another library then loads itself: its header must parse and
    cover the whole file, and its tensors pass :func:`check_weights` (no NaN or infinity, no
    degenerate normalisation). Tensors are read one at a time from the memory-mapped file.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - a safetensors handle, not a dict
                check_weights({key: handle.get_tensor(key)}, Path(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise _damaged_weights(Path(path)) from error


def load_weights(folder: Path, name: str = WEIGHTS_NAME) -> dict[str, torch.Tensor]:
    """The tensors of ``folder/name`` (safetensors), refusing pickles and damaged files."""
    folder = Path(folder)
    path = require_safetensors(folder) if name == WEIGHTS_NAME else folder / name
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise _damaged_weights(path) from error
    check_weights(state, path)
    return state


_NORM_WEIGHT = re.compile(
    r"(^|[._])(layer_?norm\d*|norm\d*|ln(_\w+|\d*)|batch_?norm\d*|bn\d*)\.weight$", re.IGNORECASE
)
_SCALES = re.compile(r"(^|[._])(std|running_var)$")


def check_weights(state: Mapping[str, torch.Tensor], path: Path) -> None:
    """Refuse weights that hold NaN or infinity, or a degenerate normalisation.

    Degenerate: a normalisation layer's weight (``*norm*.weight``, ``ln_*.weight``) that is
    all zero, which maps every input to the same output, or a standard deviation or running
    variance (``*.std``, ``*.running_var``) that is zero or negative. One
    :class:`ModelNotFoundError` sentence names the tensor.
    """
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            continue
        if tensor.numel() and not bool(torch.isfinite(tensor).all()):
            raise ModelNotFoundError(
                f"{path} holds NaN or infinite values in the tensor {name!r}, so the model would "
                "give meaningless results; download or save the model again.",
                path,
            )
        if tensor.numel() and _NORM_WEIGHT.search(name) and not bool(tensor.any()):
            raise ModelNotFoundError(
                f"{path} holds the normalisation weight {name!r} as all zeros, which maps every "
                "input to the same output; download or save the model again.",
                path,
            )
        if tensor.numel() and _SCALES.search(name) and bool((tensor <= 0).any()):
            raise ModelNotFoundError(
                f"{path} holds the scale {name!r} with zero or negative values, which the model "
                "divides by; download or save the model again.",
                path,
            )


def load_pickled_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a PyTorch checkpoint read with ``torch.load(weights_only=True)``.

    Only tensors and plain containers are unpickled; a checkpoint that needs anything else
    (objects, functions, which is how a pickle runs code) is refused with UnsafeModelError.
    """
    import pickle

    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(
            f"Checkpoint {path} is missing or not a regular file; download the model again.", path
        )
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:  # files in the legacy format cannot be memory-mapped
            if "mmap" not in str(error):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeModelError(
            f"Checkpoint {path} holds more than tensors (pickled objects that could run code), "
            "so medvl does not load it; use the checkpoint as published, or convert it to "
            "model.safetensors.",
            path,
        ) from error
    except (RuntimeError, OSError, EOFError, ValueError, KeyError) as error:
        raise ModelNotFoundError(
            f"Checkpoint {path} is truncated or damaged; download the model again.", path
        ) from error
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(
        isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in state.items()
    ):
        raise ModelNotFoundError(
            f"Checkpoint {path} is not a dictionary of named tensors; give the checkpoint file "
            "as published.",
            path,
        )
    check_weights(state, path)
    return state


def weights_mismatch(path: Path, missing: list[str], unexpected: list[str]) -> ModelNotFoundError:
    """The error for weights that do not fit the architecture their config describes."""
    parts = []
    if missing:
        parts.append(f"lacks {', '.join(missing[:2])}")
    if unexpected:
        parts.append(f"has unknown {', '.join(unexpected[:2])}")
    detail = " and ".join(parts) or "has tensors of the wrong shape"
    return ModelNotFoundError(
        f"{path} does not fit the model its config.json describes (it {detail}); download or "
        "save the model again.",
        path,
    )
