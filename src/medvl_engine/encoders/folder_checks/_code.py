"""Folders are data, never code: a model folder shipping program files, or whose JSON settings
ask transformers to import the model's own code ("auto_map", trust_remote_code), is refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medvl_engine.common.env import positive_int_setting
from medvl_engine.encoders.folder_checks._config import CONFIG_NAME, read_json_object
from medvl_engine.errors import UnsafeModelError

__all__ = ["CODE_SUFFIXES", "max_files_scanned", "refuse_code"]

CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
# JSON files of a transformers folder that may name classes to import ("auto_map").
_SETTINGS_FILES = (
    CONFIG_NAME,
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
)
_MAX_FILES_SCANNED = 10_000
_ENV_MAX_FILES_SCANNED = "MEDVL_MAX_MODEL_FOLDER_ENTRIES"


def max_files_scanned() -> int:
    """Entries a model folder may hold before its scan refuses it (default 10,000; env
    MEDVL_MAX_MODEL_FOLDER_ENTRIES, a positive whole number)."""
    return positive_int_setting(_ENV_MAX_FILES_SCANNED, _MAX_FILES_SCANNED)


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
