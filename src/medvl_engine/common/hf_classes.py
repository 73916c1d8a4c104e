"""The transformers classes the engine uses, imported from here and nowhere else.

transformers resolves ``from transformers import BertModel`` lazily, and two threads doing
so at once (a dock preloading its text model while another dock's job loads a TopKSigLIP
model) make one of them fail with "cannot import name 'BertModel' from 'transformers'".
Engine code writes ``from medvl_engine.common.hf_classes import BertModel``: each name is resolved
on first use, under one lock, and only the names asked for are imported (importing a model
family's modules costs tenths of a second). The lock is never held while an engine module
is imported, so a thread that holds an engine module's import lock while it waits here
cannot deadlock with the thread inside.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoTokenizer,
        BertConfig,
        BertModel,
        CLIPModel,
        CLIPTextConfig,
        CLIPTextModel,
        CLIPTokenizer,
        CLIPVisionConfig,
        ConvNextConfig,
        ConvNextModel,
        PreTrainedConfig,
        PreTrainedModel,
        PreTrainedTokenizerBase,
    )
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    from transformers.utils import logging as transformers_logging

    BertTokenizerFast: Any

__all__ = [
    "AutoConfig",
    "AutoModel",
    "AutoTokenizer",
    "BaseModelOutputWithPooling",
    "BertConfig",
    "BertModel",
    "BertTokenizerFast",
    "CLIPModel",
    "CLIPTextConfig",
    "CLIPTextModel",
    "CLIPTokenizer",
    "CLIPVisionConfig",
    "ConvNextConfig",
    "ConvNextModel",
    "PreTrainedConfig",
    "PreTrainedModel",
    "PreTrainedTokenizerBase",
    "transformers_attribute",
    "transformers_logging",
]

_SOURCES: dict[str, tuple[str, str | None]] = {
    "BaseModelOutputWithPooling": ("transformers.modeling_outputs", "BaseModelOutputWithPooling"),
    "transformers_logging": ("transformers.utils.logging", None),
}
_lock = threading.RLock()


def _resolve(module_name: str, attribute: str | None) -> Any:
    with _lock:
        module = importlib.import_module(module_name)
        return module if attribute is None else getattr(module, attribute, None)


def transformers_attribute(name: str) -> Any:
    """``transformers.<name>`` (a class a model folder names), or None; resolved under the
    same lock as the names above."""
    return _resolve("transformers", name)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attribute = _SOURCES.get(name, ("transformers", name))
    value = _resolve(module_name, attribute)
    if value is None:
        raise AttributeError(f"transformers has no {name!r}")
    globals()[name] = value
    return value
