"""What every export says about the model that made it: its name and, for demo models, the notice.

Exports carry :func:`model_metadata` (GeoJSON properties and metadata, CSV columns, TIFF
description) and :func:`model_footer` (the line drawn under a PNG). The notice is
:data:`medvl_engine.demo_models.DEMO_NOTICE` for the shipped demo models and any folder whose
config.json says ``"synthetic_demo": true``.
"""

from __future__ import annotations

from pathlib import Path

from medvl_engine.demo_models import demo_notice_for

__all__ = ["model_display_name", "model_footer", "model_metadata"]


def model_display_name(model: str | Path | None) -> str:
    """A registry name as it is; a folder path as its last component; None as ``"unknown"``."""
    if model is None:
        return "unknown"
    text = str(model).strip()
    if not text:
        return "unknown"
    if "/" in text or "\\" in text:
        name = Path(text.rstrip("/\\")).name
        return name or text
    return text


def model_metadata(model: str | Path | None) -> dict[str, str]:
    """``{"model": display name, "notice": demo notice or ""}`` for files that name their model."""
    return {"model": model_display_name(model), "notice": demo_notice_for(model) or ""}


def model_footer(model: str | Path | None) -> str:
    """The PNG footer line: ``model: NAME`` and, for a demo model, `` - `` and the notice."""
    metadata = model_metadata(model)
    line = f"model: {metadata['model']}"
    return f"{line} - {metadata['notice']}" if metadata["notice"] else line
