"""The models of the two methods, one family per module.

- :mod:`medvl_engine.models.limit`: report-guided pooling, the LIMIT model, zero-shot classes.
- :mod:`medvl_engine.models.topk`: Gumbel-top-K selection and differentiable patch extraction.
- :mod:`medvl_engine.models.topksiglip`: the TopKSigLIP model, its folders and inference.

The helpers below are for other packages (training, CLI, plugin); each is imported from its
private module on first use, so importing this package loads no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LORA_TARGETS", "add_lora", "merged_copy", "write_topk_outputs"]

_HOMES = {
    "LORA_TARGETS": "medvl_engine.models._lora",
    "add_lora": "medvl_engine.models._lora",
    "merged_copy": "medvl_engine.models._lora",
    "write_topk_outputs": "medvl_engine.models._topk_export",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
