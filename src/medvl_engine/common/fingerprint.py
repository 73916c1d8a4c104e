"""Content fingerprints of slides and feature files: which file a feature store belongs to.

A fingerprint is ``"<version>:<size>:<sha256 hex>"``. For one file the hash covers its size,
its first MiB, its last 64 KiB and 16 evenly spaced 4 KiB samples (files up to 4 MiB are
hashed whole), so it costs a few reads whatever the file's size, and two different scans
(or a re-export under the same name) differ. A DICOM slide is a set of files (a folder, or
a ``.dcm`` file and its ``.dcm`` neighbours): its fingerprint covers each file's name, size
and first 64 KiB (the header with its UIDs). The file's path is never part of it, so a
slide that is moved or copied keeps its fingerprint.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

__all__ = ["file_fingerprint", "short_fingerprint", "slide_fingerprint"]

_VERSION = "fp1"
_WHOLE_FILE_LIMIT = 4 * 2**20
_HEAD_BYTES = 2**20
_TAIL_BYTES = 64 * 2**10
_SAMPLE_BYTES = 4 * 2**10
_SAMPLES = 16
_MEMBER_HEAD_BYTES = 64 * 2**10
_MAX_MEMBERS = 4096


def file_fingerprint(path: str | Path) -> str:
    """Fingerprint of one regular file's content (see the module docstring)."""
    path = Path(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        digest.update(f"{_VERSION}|{size}|".encode())
        if size <= _WHOLE_FILE_LIMIT:
            digest.update(handle.read())
        else:
            digest.update(handle.read(_HEAD_BYTES))
            for index in range(1, _SAMPLES + 1):
                handle.seek(index * size // (_SAMPLES + 2))
                digest.update(handle.read(_SAMPLE_BYTES))
            handle.seek(size - _TAIL_BYTES)
            digest.update(handle.read(_TAIL_BYTES))
    return f"{_VERSION}:{size}:{digest.hexdigest()}"


def slide_fingerprint(path: str | Path) -> str:
    """Fingerprint of the slide opened from ``path``: one file, or a DICOM file set."""
    path = Path(path)
    if path.is_dir():
        return _file_set_fingerprint(_regular_files(sorted(path.iterdir())))
    if path.suffix.lower() == ".dcm":
        return _file_set_fingerprint(_regular_files(sorted(path.parent.glob("*.dcm"))))
    return file_fingerprint(path)


def short_fingerprint(fingerprint: str) -> str:
    """The first 12 hex digits of a fingerprint's hash, for file names."""
    return fingerprint.rsplit(":", 1)[-1][:12]


def _regular_files(paths: list[Path]) -> list[Path]:
    """The regular files among ``paths`` (FIFOs and devices are never opened)."""
    kept = []
    for candidate in paths:
        try:
            if stat.S_ISREG(candidate.stat().st_mode):
                kept.append(candidate)
        except OSError:
            continue
    return kept[:_MAX_MEMBERS]


def _file_set_fingerprint(files: list[Path]) -> str:
    digest = hashlib.sha256()
    total = 0
    for member in files:
        try:
            with open(member, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                head = handle.read(_MEMBER_HEAD_BYTES)
        except OSError:  # an unreadable neighbour is not part of the slide the reader opens
            continue
        total += size
        digest.update(os.fsencode(member.name) + b"\0" + str(size).encode() + b"\0")
        digest.update(hashlib.sha256(head).digest())
    return f"{_VERSION}:{total}:{digest.hexdigest()}"
