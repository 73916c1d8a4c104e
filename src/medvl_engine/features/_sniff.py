"""What a feature file is, from its first bytes: HDF5 (TRIDENT/CLAM .h5) or zip (torch .pt)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["HDF5_MAGIC", "ZIP_MAGIC", "starts_with"]

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"


def starts_with(path: Path, magic: bytes) -> bool:
    """Whether the file at ``path`` begins with ``magic`` (False when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(magic)) == magic
    except OSError:
        return False
