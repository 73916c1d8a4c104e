"""LoRA for LIMIT text towers through peft (the "LoRA vs full" ablation of Table 4).

``W x + (alpha / r) B A x`` on the attention projections of the transformers backbone;
the chosen modules depend on the backbone's ``model_type`` (a lookup in
:data:`medvl_engine.encoders.lora_targets.LORA_TARGETS`, not name matching).
Saved towers are merged back into plain weights, so loading needs no peft.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, cast

from torch import nn

from medvl_engine.encoders.lora_targets import LORA_TARGETS
from medvl_engine.errors import ConfigError, MissingDependencyError

if TYPE_CHECKING:
    from medvl_engine.encoders.text_tower import TextTower

__all__ = ["add_lora", "merged_copy"]


def add_lora(tower: TextTower, rank: int = 8, alpha: float = 16.0, dropout: float = 0.0) -> None:
    """Wrap ``tower.text`` (a transformers backbone) with LoRA adapters, in place.

    Afterwards only the adapters (and anything outside ``tower.text``, such as the
    projection) require gradients.
    """
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise MissingDependencyError(
            "LoRA fine-tuning needs peft; run `pip install peft` or set task.finetune=full."
        ) from None
    model_type = getattr(tower.text.config, "model_type", None)
    if model_type not in LORA_TARGETS:
        raise ConfigError(
            f"LoRA has no target modules for text backbones of type {model_type!r}; known: "
            f"{sorted(LORA_TARGETS)}. Use task.finetune=full."
        )
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates an int; it divides by r
        lora_dropout=dropout,
        target_modules=LORA_TARGETS[model_type],
    )
    tower.text = get_peft_model(tower.text, config)


def merged_copy(module: nn.Module) -> nn.Module:
    """A deep copy of a module holding a text tower with LoRA merged into plain weights.

    ``module`` is a text tower (``.text``) or a model with ``.text_tower``; without LoRA the
    copy is returned unchanged.
    """
    clone = copy.deepcopy(module)
    tower = cast("TextTower", getattr(clone, "text_tower", clone))
    merge = getattr(tower.text, "merge_and_unload", None)  # present once LoRA wraps the backbone
    if merge is not None:
        tower.text = merge()
    return clone
