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

from medvl_engine.encoders.folder_checks._code import CODE_SUFFIXES, max_files_scanned, refuse_code
from medvl_engine.encoders.folder_checks._config import (
    CONFIG_NAME,
    config_int,
    config_section,
    read_config,
    read_json_object,
)
from medvl_engine.encoders.folder_checks._folder import (
    TOKENIZER_VOCABULARIES,
    check_model_folder,
    load_tokenizer,
    require_tokenizer_files,
)
from medvl_engine.encoders.folder_checks._loading import folder_errors
from medvl_engine.encoders.folder_checks._weights import (
    PICKLE_SUFFIXES,
    WEIGHTS_NAME,
    check_safetensors,
    check_weights,
    load_pickled_state_dict,
    load_weights,
    weights_mismatch,
)

__all__ = [
    "CODE_SUFFIXES",
    "CONFIG_NAME",
    "PICKLE_SUFFIXES",
    "TOKENIZER_VOCABULARIES",
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
    "max_files_scanned",
    "read_config",
    "read_json_object",
    "refuse_code",
    "require_tokenizer_files",
    "weights_mismatch",
]
