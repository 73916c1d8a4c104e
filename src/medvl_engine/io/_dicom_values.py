"""DICOM attribute values read defensively, and why a DICOM file could not be read, in words.

pydicom converts attribute values lazily and raises many unrelated exception types on damaged
bytes (BytesLengthException, struct.error, UnicodeDecodeError, ValueError, ...). The DICOM
readers use these helpers so that a damaged value becomes None or a sentence naming the
attribute, never raw exception text.
"""

from __future__ import annotations

import math
import struct
import warnings
from pathlib import Path
from typing import Any

__all__ = [
    "as_list",
    "finite_number",
    "first",
    "is_regular_file",
    "printable",
    "read_problem",
    "stated",
    "whole_number",
]


def first(value: Any) -> Any:
    """The first item of a multi-valued attribute, the value itself otherwise (None if empty)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return value[0] if len(value) else None
    return value


def as_list(value: Any) -> list[Any]:
    """Every item of a multi-valued attribute as a list ([] for None)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return list(value)
    return [value]


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is absent, not a number, NaN or infinite."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def whole_number(value: Any) -> int | None:
    """``value`` as an int, or None when it is absent or not a whole number."""
    number = finite_number(first(value))
    if number is None or number != int(number):
        return None
    return int(number)


def stated(value: Any) -> str:
    """A value as the file states it, for a sentence: multi-values joined by a backslash."""
    items = as_list(value)
    if not items:
        return "empty"
    text = "\\".join(str(item).strip() for item in items)
    if not all(" " <= char <= "~" for char in text):
        return "an unreadable value"
    return text if len(text) <= 40 else text[:37] + "..."


def printable(value: Any, limit: int = 64) -> str:
    """A short text value fit for a sentence, or "" when it is empty, garbled or too long."""
    text = str(first(value) if value is not None else "").strip()
    if len(text) > limit or not all(" " <= char <= "~" for char in text):
        return ""
    return text


def read_problem(error: BaseException) -> str:
    """Why pydicom could not read a file's header or values, as a phrase a user understands."""
    from pydicom.errors import BytesLengthException, InvalidDicomError

    if isinstance(error, InvalidDicomError):
        return "it is not a DICOM file (its header has no DICM marker)"
    if isinstance(error, (BytesLengthException, EOFError, struct.error)):
        return "its header ends in the middle of an element, so the file is truncated or damaged"
    if isinstance(error, UnicodeError):
        return "its header holds text in an encoding that cannot be read, so it is damaged"
    if isinstance(error, OSError):
        reason = (error.strerror or "a read error").lower()
        return f"it cannot be read from the disk ({reason})"
    return "its header is malformed, so the file is damaged"


def is_regular_file(path: Path) -> bool:
    """True for a regular file holding stored data (links followed); False for folders,
    FIFOs, devices, sockets and entries of /proc, /sys or /dev. Nothing is opened."""
    from medvl_engine.errors import MedVLError
    from medvl_engine.io.safe_open import require_regular_file

    try:
        require_regular_file(path)
    except MedVLError:
        return False
    return True
