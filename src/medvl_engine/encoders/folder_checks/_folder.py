"""The whole-folder check (:func:`check_model_folder`) and the tokenizer's: a vocabulary file
present and a loaded tokenizer with more than its special tokens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from medvl_engine.encoders.folder_checks._code import refuse_code
from medvl_engine.encoders.folder_checks._config import read_config
from medvl_engine.encoders.folder_checks._loading import folder_errors
from medvl_engine.encoders.folder_checks._weights import require_safetensors
from medvl_engine.errors import ModelNotFoundError

__all__ = [
    "TOKENIZER_VOCABULARIES",
    "check_model_folder",
    "load_tokenizer",
    "require_tokenizer_files",
]

# Any one of these sets of files is a tokenizer vocabulary.
TOKENIZER_VOCABULARIES = (
    ("tokenizer.json",),
    ("vocab.txt",),
    ("vocab.json", "merges.txt"),
    ("spiece.model",),
    ("tokenizer.model",),
    ("sentencepiece.bpe.model",),
)

T = TypeVar("T")


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
        require_safetensors(folder)
    if needs_tokenizer:
        require_tokenizer_files(folder)
    return config
