"""Errors a user can act on.

Every error raised to a user is a :class:`MedVLError` whose message is one
sentence naming the file or input, the problem, and what to do about it. The
CLI prints that sentence and exits with status 2; the viewer plugin shows it
as a notification.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "MedVLError",
    "UnsupportedFormatError",
    "CorruptFileError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "ConfigError",
    "DataError",
    "ExportError",
    "CancelledError",
    "ResourceLimitError",
    "UnsafeModelError",
    "StorageError",
]


class MedVLError(Exception):
    """Base class for errors whose message is meant for the user."""

    exit_code: int = 2

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = Path(path) if path is not None else None

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsupportedFormatError(MedVLError):
    """The file exists but is not a format (or layout) the engine reads."""


class CorruptFileError(MedVLError):
    """The file claims a supported format but its content cannot be decoded."""


class MissingDependencyError(MedVLError):
    """An optional package (decoder, model library) is needed and not installed."""


class ModelNotFoundError(MedVLError):
    """A model name or path does not resolve to weights on disk or on the hub."""


class ConfigError(MedVLError):
    """A configuration file or override is invalid."""


class DataError(MedVLError):
    """A manifest, feature store or dataset is missing or inconsistent."""


class ExportError(MedVLError):
    """An export could not be written."""


class CancelledError(MedVLError):
    """A long-running job was cancelled by the user."""


class ResourceLimitError(MedVLError):
    """The input would need more memory or time than the configured limit allows."""


class UnsafeModelError(ModelNotFoundError):
    """A model folder or setting asks to run code or unpickle data, which is never done."""


class StorageError(ExportError):
    """The machine refused a write: the disk is full, the folder or file system is read-only,
    or permission is denied (see :mod:`medvl_engine.common.write_errors`)."""
