"""Pretrained weights a training recipe names: loaded, or one sentence, never a silent swap.

A recipe that names weights (``task.vision_pretrained: facebook/convnext-tiny-224``) means
them: a run that quietly fell back to random initialisation would train a different model
under the recipe's name. Random initialisation is chosen explicitly with ``null``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from medvl_engine.encoders.folder_checks import (
    check_weights,
    folder_errors,
    read_config,
    refuse_code,
)
from medvl_engine.errors import ModelNotFoundError

__all__ = ["load_pretrained"]


T = TypeVar("T")


def load_pretrained(model_class: type[T], source: str, what: str, setting: str) -> T:
    """``model_class.from_pretrained(source)`` (a local folder or Hugging Face id) without remote
    code; a folder shipping code is refused, weights that cannot be found stop with a sentence
    naming them, how to get them and how to choose random initialisation instead."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        read_config(folder, required=False)  # sizes within the budget before anything is built
        refuse_code(folder)
        with folder_errors(folder, f"{what} weights"):
            loaded: T = model_class.from_pretrained(str(folder), trust_remote_code=False)  # type: ignore[attr-defined]
        _check_loaded(loaded, folder)
        return loaded
    try:
        with folder_errors(folder, f"{what} weights"):
            fetched: T = model_class.from_pretrained(source, trust_remote_code=False)  # type: ignore[attr-defined]
        _check_loaded(fetched, folder)
        return fetched
    except ModelNotFoundError as error:
        if isinstance(error.__cause__, (OSError, ValueError)):
            raise ModelNotFoundError(
                f"The {what} weights {source!r} ({setting}) are not on disk or in the Hugging "
                f"Face cache, and could not be downloaded; download them with `huggingface-cli "
                f"download {source}` (or set {setting} to their folder), or set {setting}=null "
                "to train from random initialisation on purpose.",
                source,
            ) from error.__cause__
        raise


def _check_loaded(model: object, source: Path) -> None:
    """NaN, infinity or a degenerate normalisation in loaded weights: one sentence."""
    state_dict = getattr(model, "state_dict", None)
    if callable(state_dict):
        check_weights(state_dict(), source)
