"""Limits a user may raise or lower from the environment (``MEDVL_MAX_*``), read one way."""

from __future__ import annotations

import os

__all__ = ["positive_int_setting"]


def positive_int_setting(variable: str, default: int) -> int:
    """``$variable`` as a whole number (``1e9`` and ``1_000_000`` are read too), or
    ``default`` when it is unset, not a number, infinite, or not positive."""
    text = os.environ.get(variable, "").strip().replace("_", "")
    if not text:
        return default
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        return default
    return value if value > 0 else default
