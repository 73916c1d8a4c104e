"""Checks a model folder passes before anything in it is loaded: folders are data, never code.

A model folder holds ``config.json`` (a JSON object), weights in ``model.safetensors`` and,
for models with a text side, tokenizer files. Nothing in it is ever executed:

- Python shipped in the folder (``*.py``) or asked for by an ``"auto_map"`` key in its JSON
  files is refused with :class:`UnsafeModelError`; architectures come from medvl's own code,
  chosen by ``model_type``.
- Pickled weights (``pytorch_model.bin`` and friends) are refused where safetensors are
  expected; the few published checkpoints that exist only as pickles are read with
  :func:`load_pickled_state_dict` (``torch.load(weights_only=True)``, tensors only).
- Everything else that is wrong (missing or damaged files, a config.json that is not a JSON
  object or lacks a size, a tokenizer without its vocabulary) is one
  :class:`ModelNotFoundError` sentence naming the file, the problem and what to do.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch

from medvl_engine.common.env import positive_int_setting
from medvl_engine.errors import MedVLError, ModelNotFoundError, UnsafeModelError

__all__ = [
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "check_model_folder",
    "check_safetensors",
    "check_weights",
    "config_int",
    "config_section",
    "folder_errors",
    "load_pickled_state_dict",
    "load_tokenizer",
    "load_weights",
    "read_config",
    "read_json_object",
    "refuse_code",
    "require_tokenizer_files",
    "weights_mismatch",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
# JSON files of a transformers folder that may name classes to import ("auto_map").
_SETTINGS_FILES = (
    CONFIG_NAME,
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
)
# Any one of these sets of files is a tokenizer vocabulary.
TOKENIZER_VOCABULARIES = (
    ("tokenizer.json",),
    ("vocab.txt",),
    ("vocab.json", "merges.txt"),
    ("spiece.model",),
    ("tokenizer.model",),
    ("sentencepiece.bpe.model",),
)
_MAX_JSON_BYTES = 16 * 1024 * 1024
_MAX_FILES_SCANNED = 10_000
_ENV_MAX_FILES_SCANNED = "MEDVL_MAX_MODEL_FOLDER_ENTRIES"


def max_files_scanned() -> int:
    """Entries a model folder may hold before its scan refuses it (default 10,000; env
    MEDVL_MAX_MODEL_FOLDER_ENTRIES, a positive whole number)."""
    return positive_int_setting(_ENV_MAX_FILES_SCANNED, _MAX_FILES_SCANNED)


T = TypeVar("T")


def read_json_object(path: Path, what: str = "model settings") -> dict[str, Any]:
    """The JSON object in ``path`` (at most 16 MiB), or one sentence saying what is wrong."""
    if not path.is_file():
        raise ModelNotFoundError(
            f"{path} is missing or not a regular file; restore the model folder's {what}.", path
        )
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise ModelNotFoundError(
            f"{path} is larger than {_MAX_JSON_BYTES // (1024 * 1024)} MiB, far more than "
            f"{what} need; restore the model folder.",
            path,
        )
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ModelNotFoundError(
            f"{path} is not valid JSON; restore the model folder (download or save it again).",
            path,
        ) from error
    if not isinstance(values, dict):
        raise ModelNotFoundError(
            f"{path} holds a JSON {type(values).__name__} where a JSON object with the {what} "
            "is expected; restore the model folder.",
            path,
        )
    return values


def read_config(folder: Path, *, required: bool = True) -> dict[str, Any]:
    """The folder's config.json as a dict; ``{}`` when absent and not ``required``."""
    path = Path(folder) / CONFIG_NAME
    if not path.exists() and not required:
        return {}
    values = read_json_object(path, "model settings")
    model_type = values.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ModelNotFoundError(
            f'{path} has a "model_type" of {json.dumps(model_type)[:40]}, not a name; '
            "restore the model folder.",
            path,
        )
    from medvl_engine.encoders.config_budget import check_config_sizes

    check_config_sizes(values, str(path))
    return values


def _asks_for_code(values: Any) -> bool:
    """Whether a JSON value names code to import: an "auto_map" or trust_remote_code anywhere."""
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "auto_map" in value or value.get("trust_remote_code"):
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _scan_error(folder: Path, problem: str) -> UnsafeModelError:
    return UnsafeModelError(
        f"Model folder {folder} {problem}, so medvl cannot check that it holds no program code; "
        "use a folder holding only config.json, model.safetensors and tokenizer files.",
        folder,
    )


def _code_files(folder: Path) -> list[str]:
    """Names of program files anywhere under ``folder``, symlinked sub-folders included.

    Every entry is counted; a folder with more than :func:`max_files_scanned` entries (or
    one that cannot be listed) is refused rather than passed half-checked. A symlinked
    sub-folder is scanned like a real one (each real folder once, so a link loop ends).
    """
    found: list[str] = []
    seen: set[Path] = set()
    pending = [folder]
    count, limit = 0, max_files_scanned()
    while pending:
        current = pending.pop()
        try:
            real = current.resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # a dangling link is no code; the loaders report missing files
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError as error:
            raise _scan_error(
                folder, f"has a sub-folder that cannot be listed ({current.name})"
            ) from error
        for entry in entries:
            count += 1
            if count > limit:
                raise _scan_error(
                    folder,
                    f"holds more than {limit:,} files and folders ({_ENV_MAX_FILES_SCANNED})",
                )
            path = Path(entry.path)
            if path.suffix in CODE_SUFFIXES:
                found.append(str(path.relative_to(folder)))
            try:
                is_folder = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_folder = False
            if is_folder:
                pending.append(path)
    return sorted(found)


def refuse_code(folder: Path, config: dict[str, Any] | None = None) -> None:
    """UnsafeModelError when the folder ships Python or its JSON files ask to import code."""
    folder = Path(folder)
    code = _code_files(folder)
    if code:
        shown = ", ".join(code[:3]) + (" ..." if len(code) > 3 else "")
        raise UnsafeModelError(
            f"Model folder {folder} contains program code ({shown}); medvl never runs code from "
            "a model folder, so use a folder holding only config.json, model.safetensors and "
            "tokenizer files.",
            folder,
        )
    for name in _SETTINGS_FILES:
        path = folder / name
        if name == CONFIG_NAME and config is not None:
            values: Any = config
        elif path.is_file():
            values = read_json_object(path, "settings")
        else:
            continue
        if _asks_for_code(values):
            raise UnsafeModelError(
                f'{path} asks to import the model\'s own code ("auto_map" or trust_remote_code); '
                "medvl never runs code from a model folder, so use a folder whose model_type "
                "medvl implements itself.",
                path,
            )


def require_tokenizer_files(folder: Path) -> None:
    """ModelNotFoundError unless the folder holds a tokenizer vocabulary."""
    folder = Path(folder)
    for names in TOKENIZER_VOCABULARIES:
        if all((folder / name).is_file() for name in names):
            return
    raise ModelNotFoundError(
        f"Model folder {folder} has no tokenizer vocabulary (tokenizer.json, vocab.txt, or "
        "vocab.json with merges.txt); copy the tokenizer files back into the folder.",
        folder,
    )


def load_tokenizer(folder: Path, load: Callable[[], T]) -> T:
    """Run ``load()`` (a tokenizer constructor) and check the result has a real vocabulary.

    A tokenizer whose vocabulary file is damaged or empty still builds in transformers, with
    only its special tokens, and then gives meaningless ids; that is refused here.
    """
    folder = Path(folder)
    require_tokenizer_files(folder)
    with folder_errors(folder, "tokenizer files"):
        tokenizer = load()
    size = len(tokenizer)  # type: ignore[arg-type]
    specials = len(getattr(tokenizer, "all_special_ids", []) or [])
    if size <= max(specials, 2):
        raise ModelNotFoundError(
            f"The tokenizer in {folder} has only {size} tokens, so its vocabulary file is empty "
            "or damaged; copy the tokenizer files back into the folder.",
            folder,
        )
    return tokenizer


def check_model_folder(
    folder: Path, *, needs_weights: bool = True, needs_tokenizer: bool = False
) -> dict[str, Any]:
    """Validate a folder in medvl's layout and return its config.json.

    Refuses program code, a missing or malformed config.json, pickled weights in place of
    model.safetensors (``needs_weights``) and a missing vocabulary (``needs_tokenizer``).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelNotFoundError(
            f"Model folder {folder} does not exist or is not a folder; give the folder holding "
            "config.json and model.safetensors.",
            folder,
        )
    config = read_config(folder)
    refuse_code(folder, config)
    if needs_weights:
        _require_safetensors(folder)
    if needs_tokenizer:
        require_tokenizer_files(folder)
    return config


def _require_safetensors(folder: Path) -> Path:
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
    path = _require_safetensors(folder) if name == WEIGHTS_NAME else folder / name
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


def config_section(config: dict[str, Any], key: str, source: Path) -> dict[str, Any]:
    """``config[key]`` when it is a JSON object, else one sentence naming the field."""
    value = config.get(key)
    if not isinstance(value, dict):
        raise ModelNotFoundError(
            f'{source} lacks the "{key}" section (a JSON object) that describes the model; '
            "restore the model folder.",
            source,
        )
    return value


def config_int(
    config: dict[str, Any], key: str, source: Path, *, default: int | None = None, minimum: int = 1
) -> int:
    """An integer setting of at least ``minimum``; missing only when a ``default`` is given."""
    value = config.get(key, default)
    if value is None:
        raise ModelNotFoundError(
            f'{source} does not give "{key}", a size the model needs; restore the model folder.',
            source,
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelNotFoundError(
            f'{source} gives "{key}" as {json.dumps(value)[:40]}, but it must be a whole number '
            f"of at least {minimum}; restore the model folder.",
            source,
        )
    return value


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


_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved: tuple[int, bool] | None = None


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' progress bars and load reports; the user gets our one sentence.

    Counted across threads: the settings come back when the last of several models loading
    at once (two docks) is done, not when the first one is.
    """
    try:
        from medvl_engine.common.hf_classes import transformers_logging
    except ImportError:  # pragma: no cover - transformers is a core dependency
        yield
        return
    global _quiet_depth, _quiet_saved
    with _quiet_lock:
        if _quiet_depth == 0:
            _quiet_saved = (
                transformers_logging.get_verbosity(),
                transformers_logging.is_progress_bar_enabled(),
            )
            transformers_logging.set_verbosity_error()
            transformers_logging.disable_progress_bar()
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0 and _quiet_saved is not None:
                verbosity, bars = _quiet_saved
                transformers_logging.set_verbosity(verbosity)
                if bars:
                    transformers_logging.enable_progress_bar()


@contextmanager
def folder_errors(folder: Path, what: str) -> Iterator[None]:
    """Turn failures of third-party loaders on a folder's files into one sentence.

    transformers and tokenizers raise many exception types (some plain ``Exception``) for
    damaged files or configs that do not fit the weights; the user gets the folder and what
    to do, and the original error stays chained for ``--debug``. transformers' own load
    reports and progress bars are silenced meanwhile.
    """
    try:
        with _quiet_transformers():
            yield
    except MedVLError:
        raise
    except Exception as error:  # noqa: BLE001 - third-party parse errors have no common base
        raise ModelNotFoundError(
            f"The {what} in {folder} are damaged or do not fit together (sizes in config.json "
            "that differ from the saved weights, or unreadable files); download or save the "
            "model again.",
            folder,
        ) from error
