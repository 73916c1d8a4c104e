"""A TopKSigLIP model folder: ``config.json`` (:class:`TopKSigLIPConfig`), ``model.safetensors``
and the tokenizer files (or the name of a referenced frozen text tower).

:func:`save_topksiglip` writes one atomically; :func:`load_topksiglip` reads one offline from a
path or a name that :func:`medvl_engine.encoders.resolve.resolve_topksiglip` finds.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from medvl_engine.common.atomic import atomic_directory
from medvl_engine.common.hf_classes import BertConfig
from medvl_engine.encoders.resolve import resolve_topksiglip
from medvl_engine.errors import ConfigError, ModelNotFoundError
from medvl_engine.models import _bert_text, _clip_text
from medvl_engine.models.topksiglip import MODEL_TYPE, TopKSigLIP, TopKSigLIPConfig
from medvl_engine.models.topksiglip_ranges import check_topksiglip_values

__all__ = [
    "CONFIG_NAME",
    "TEXT_REFERENCE_KEY",
    "WEIGHTS_NAME",
    "load_topksiglip",
    "save_topksiglip",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TEXT_REFERENCE_KEY = "text_reference"
"""config.json key naming a pretrained frozen text tower that the folder does not copy."""
_TEXT_PREFIX = "text_model."


def _is_packaged_minilm(text_model: nn.Module) -> bool:
    """True when ``text_model`` holds exactly the weights of the packaged all-MiniLM-L6-v2."""
    reference = _bert_text.build_bert_model(_bert_text.MINILM, {}).state_dict()
    state = text_model.state_dict()
    return state.keys() == reference.keys() and all(
        state[key].shape == reference[key].shape and torch.equal(state[key], reference[key])
        for key in state
    )


def save_topksiglip(
    model: TopKSigLIP,
    directory: str | Path,
    *,
    text_by_reference: bool = False,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """Write ``config.json``, ``model.safetensors`` and the tokenizer into ``directory``.

    Files are written to a temporary sibling folder that then replaces ``directory``, so an
    interrupted save never leaves a half-written model. ``text_by_reference`` (a frozen
    :data:`~medvl_engine.models._bert_text.MINILM` text tower only) stores the tower and its
    tokenizer as the name ``text_reference`` in config.json instead of copying them: the folder
    then holds only the trained parameters. ``extra_config`` adds keys to config.json.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    reference = None
    if text_by_reference:
        if not (
            model.config.text_family == "bert"
            and model.config.freeze_text
            and _is_packaged_minilm(model.text_model)
        ):
            raise ValueError(
                f"only a frozen {_bert_text.MINILM} text tower, unchanged, can be saved by "
                "reference"
            )
        reference = _bert_text.MINILM

    def fill(staging: Path) -> None:
        config = dataclasses.replace(model.config, vision_pretrained=None, text_pretrained=None)
        text_fields = model.text_model.config.to_dict()
        if model.config.text_family == "bert":
            config.text_config = {
                key: value
                for key, value in text_fields.items()
                if key in BertConfig().to_dict()
                and key not in ("architectures", "transformers_version")
            }
        else:
            keep = (
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "hidden_act",
                "layer_norm_eps",
                "projection_dim",
            )
            config.text_config = {key: text_fields[key] for key in keep if key in text_fields}
            config.text_config["max_position_embeddings"] = model.config.context_length
        values = config.to_dict()
        if reference is not None:
            values[TEXT_REFERENCE_KEY] = reference
        values.update(extra_config or {})
        (staging / CONFIG_NAME).write_text(json.dumps(values, indent=2), encoding="utf-8")
        state = {
            key: value.detach().cpu().contiguous()
            for key, value in model.state_dict().items()
            if reference is None or not key.startswith(_TEXT_PREFIX)
        }
        save_file(state, str(staging / WEIGHTS_NAME))
        if reference is None:
            model.tokenizer.save_pretrained(str(staging))

    return atomic_directory(directory, fill, what="TopKSigLIP model")


def _text_reference(folder: Path) -> str | None:
    """The referenced text tower of a model folder (only :data:`_bert_text.MINILM` is accepted),
    or None when the folder holds its own text tower."""
    try:
        values = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # check_model_folder reports a missing or malformed config.json
    reference = values.get(TEXT_REFERENCE_KEY) if isinstance(values, dict) else None
    if reference is None:
        return None
    if reference != _bert_text.MINILM or values.get("text_family") != "bert":
        raise ModelNotFoundError(
            f"{folder / CONFIG_NAME} references the text tower {reference!r}; only "
            f"{_bert_text.MINILM!r} (a BERT tower) can be referenced, so pass a folder that holds "
            "its text tower.",
            folder / CONFIG_NAME,
        )
    return str(reference)


def load_topksiglip(name_or_path: str | Path, device: str | torch.device = "cpu") -> TopKSigLIP:
    """Load a model directory written by :func:`save_topksiglip` (offline, eval mode).

    The folder is data only (see :mod:`medvl_engine.encoders.folder_checks`): no code, weights
    from model.safetensors, the architecture from :class:`TopKSigLIPConfig`; pretrained-source
    fields in its config.json are ignored, so loading never downloads or falls back. Every
    size in config.json is checked against its range and the parameter budget
    (:mod:`medvl_engine.models.topksiglip_ranges`) before the model is built, and the weights
    for NaN, infinity and degenerate normalisation once read.
    """
    from medvl_engine.encoders.folder_checks import (
        check_model_folder,
        folder_errors,
        load_tokenizer,
        load_weights,
        weights_mismatch,
    )

    folder = resolve_topksiglip(name_or_path).path
    config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    if not config_path.is_file() or not weights_path.is_file():
        raise ModelNotFoundError(
            f"model folder {folder} lacks {CONFIG_NAME} or {WEIGHTS_NAME}; pass a folder saved by "
            "medvl-train topksiglip.",
            folder,
        )
    reference = _text_reference(folder)
    values = check_model_folder(folder, needs_tokenizer=reference is None)
    if values.get("model_type") != MODEL_TYPE:
        raise ModelNotFoundError(
            f"{config_path} is not a TopKSigLIP config (model_type {values.get('model_type')!r}); "
            "pass a TopKSigLIP model folder.",
            config_path,
        )
    with folder_errors(folder, "TopKSigLIP settings"):
        config = TopKSigLIPConfig.from_dict(values)
        config = dataclasses.replace(config, vision_pretrained=None, text_pretrained=reference)
    try:  # every size within its range and the budget, before anything is built
        check_topksiglip_values(
            config,
            section=str(config_path),
            key_format='"{field}" in {section}',
            hint="restore the model folder",
        )
    except ConfigError as error:
        raise ModelNotFoundError(error.message, config_path) from None
    if reference is not None:  # the installed MiniLM package provides tower and tokenizer
        tokenizer = _bert_text.load_bert_tokenizer(reference)
    else:
        tokenizer = load_tokenizer(
            folder,
            lambda: (
                _bert_text.load_bert_tokenizer(folder)
                if config.text_family == "bert"
                else _clip_text.load_tokenizer(folder)
            ),
        )
    with folder_errors(folder, "TopKSigLIP settings"):
        model = TopKSigLIP(config, tokenizer)
    state = load_weights(folder)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:  # tensors of the wrong shape for the sizes in config.json
        raise weights_mismatch(weights_path, [], []) from error
    real_missing = [
        key
        for key in missing
        if not key.endswith("position_ids")
        and not (reference is not None and key.startswith(_TEXT_PREFIX))
    ]
    if real_missing or unexpected:
        raise weights_mismatch(weights_path, real_missing, list(unexpected))
    return model.to(device).eval()
