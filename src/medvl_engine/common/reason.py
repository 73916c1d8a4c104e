"""The reason a library gave for a failure, as text that fits inside one error sentence."""

from __future__ import annotations

__all__ = ["error_reason", "one_line"]

_MAX_REASON_CHARS = 2000


def one_line(text: str, limit: int = _MAX_REASON_CHARS) -> str:
    """``text`` with its lines folded into one: blank lines dropped, the others joined by "; ".

    A line ending in ":" (a heading such as "no plugin could decode it:") is joined to the
    next by a space instead. Only text longer than ``limit`` characters is shortened, with
    "..." at the end.
    """
    parts = [line.strip() for line in text.splitlines() if line.strip()]
    folded = ""
    for part in parts:
        if not folded:
            folded = part
        elif folded.endswith((":", ";", ",")):
            folded = f"{folded} {part}"
        else:
            folded = f"{folded}; {part}"
    if len(folded) > limit:
        folded = folded[: limit - 3].rstrip() + "..."
    return folded


def error_reason(error: BaseException) -> str:
    """``str(error)`` folded into one line; "" when the exception carries no text."""
    return one_line(str(error))
