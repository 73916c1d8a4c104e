"""The layers LoRA adapts in each text backbone, by the backbone's transformers ``model_type``.

A lookup table, not name matching: :func:`medvl_engine.encoders.lora.add_lora` reads it, and
:class:`medvl_engine.encoders.conch_text.ConchTextModel` adds the entry for CONCH's text
transformer when one is built (its layer names depend on the architecture). The table lives
apart from ``lora`` so that the CONCH text model can register here without importing the
LoRA code, which itself names :class:`~medvl_engine.encoders.text_tower.TextTower`.
"""

from __future__ import annotations

__all__ = ["LORA_TARGETS"]

# model_type -> names of the nn.Linear layers that get ``W x + (alpha / r) B A x``
LORA_TARGETS: dict[str, list[str]] = {
    "bert": ["query", "value"],
    "roberta": ["query", "value"],
    "xlm-roberta": ["query", "value"],
    "clip_text_model": ["q_proj", "v_proj"],
    "clip": ["q_proj", "v_proj"],
}
