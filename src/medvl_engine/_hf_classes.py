"""The transformers classes the engine uses, imported from here and nowhere else.

transformers resolves ``from transformers import BertModel`` lazily, and two threads doing
so at once (a dock preloading its text model while another dock's job loads a TopKSigLIP
model) make one of them fail with "cannot import name 'BertModel' from 'transformers'".
Python runs this module's imports in one thread while the others wait for the module, so
engine code that takes its transformers classes from here never resolves them concurrently.
Importing it imports transformers (1 - 2 s): import it where a model is built or loaded.
"""

from __future__ import annotations

import threading
from typing import Any

import transformers
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

BertTokenizerFast = transformers.BertTokenizerFast  # type: ignore[attr-defined]

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

_lookup_lock = threading.Lock()


def transformers_attribute(name: str) -> Any:
    """``transformers.<name>`` (a class a model folder names), or None; resolved under a lock
    for the same reason as the names above."""
    with _lookup_lock:
        return getattr(transformers, name, None)
