"""User-facing messages: a MedVLError becomes one napari notification, never a traceback."""

from __future__ import annotations

from napari.utils.notifications import show_error, show_info

__all__ = ["report_error", "report_info"]


def report_error(error: BaseException) -> str:
    """Show ``error`` as a napari error notification and return the sentence shown.

    A MedVLError's message is already the one sentence meant for the user; any
    other exception is a bug, shown with its type so it can be reported.
    """
    from medvl_engine.errors import MedVLError

    if isinstance(error, MedVLError):
        message = str(error)
    else:
        message = f"Unexpected {type(error).__name__}: {error}"
    show_error(message)
    return message


def report_info(message: str) -> None:
    """Show an informational notification."""
    show_info(message)
