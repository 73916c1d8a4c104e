"""WADO-RS retrieval of instances into the local cache, one DICOM file per instance.

Layout: ``<cache>/dicomweb/<server>/<study UID>/<series UID>/<instance UID>.dcm`` (``<cache>``
is ``$MEDVL_CACHE``, default ``~/.cache/medvl``). Each file is written atomically, so a file
that is there is complete and is not fetched again. The instances are asked for in the
transfer syntax they were stored in (no transcoding by the server), streamed to disk and
written byte for byte as the server sent them (:mod:`._download`). The file is opened
afterwards by the ordinary readers, so every check of a local file applies to it too.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from medvl_engine.io.dicomweb._client import server_errors
from medvl_engine.io.dicomweb._download import copy_range, dicom_part, downloaded
from medvl_engine.io.dicomweb._errors import DicomWebError
from medvl_engine.io.dicomweb._parts import DICOM_MULTIPART_ACCEPT
from medvl_engine.io.dicomweb._query import InstanceEntry
from medvl_engine.io.dicomweb._reference import DicomWebReference, valid_uid

__all__ = ["cache_folder", "cached_path", "retrieve_instances"]


def cache_folder(reference: DicomWebReference, *, create: bool = False) -> Path:
    """The cache folder of ``reference``'s server: ``<cache>/dicomweb/<host_port>-<hash>``."""
    from medvl_engine.common.cache import cache_dir

    readable = re.sub(r"[^A-Za-z0-9.-]+", "_", reference.server)[:60]
    digest = hashlib.sha256(reference.root.encode()).hexdigest()[:10]
    return cache_dir("dicomweb", f"{readable}-{digest}", create=create)


def cached_path(reference: DicomWebReference, entry: InstanceEntry) -> Path:
    """Where ``entry`` is (or will be) kept in the cache."""
    for uid in (entry.study, entry.series, entry.uid):
        if not valid_uid(uid):  # the names become path parts: never anything but a UID
            raise DicomWebError(f"{uid[:70]!r} is not a DICOM UID; it cannot name a cached file.")
    return cache_folder(reference) / entry.study / entry.series / f"{entry.uid}.dcm"


def retrieve_instances(
    reference: DicomWebReference, entries: Sequence[InstanceEntry], timeout: float
) -> list[Path]:
    """The local files of ``entries``, fetched with WADO-RS unless already cached.

    Returns the paths in the order of ``entries``. Raises DicomWebError subclasses for
    server faults and when an answer is not the instance asked for; nothing half-written
    is left in the cache.
    """

    paths = []
    for entry in entries:
        path = cached_path(reference, entry)
        if not path.is_file() or path.stat().st_size == 0:
            cache_folder(reference, create=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            _retrieve_one(reference, entry, path, timeout)
        paths.append(path)
    return paths


def _retrieve_one(
    reference: DicomWebReference, entry: InstanceEntry, path: Path, timeout: float
) -> None:
    """Stream instance ``entry`` into ``path`` (atomically) as the server sent it."""
    from medvl_engine.common.atomic import atomic_write

    url = f"{reference.root}/studies/{entry.study}/series/{entry.series}/instances/{entry.uid}"
    headers = {"Accept": DICOM_MULTIPART_ACCEPT}
    with server_errors(reference, f"retrieving instance {entry.uid}", timeout):
        with downloaded(url, headers, timeout, path.parent) as (handle, content_type):
            start, end = dicom_part(handle, content_type)
            _check_instance(reference, entry, handle, start)
            atomic_write(path, functools.partial(copy_range, handle, start, end), what="DICOM file")


def _check_instance(
    reference: DicomWebReference, entry: InstanceEntry, handle: IO[bytes], start: int
) -> None:
    """DicomWebError unless the part at ``start`` is a DICOM file of instance ``entry.uid``."""
    import pydicom

    handle.seek(start)
    try:
        header = pydicom.dcmread(handle, stop_before_pixels=True)
        got = str(header.get("SOPInstanceUID", ""))
    except Exception:  # any decoding failure means: not the instance asked for
        got = ""
    if got != entry.uid:
        what = f"instance {got[:70]}" if got else "something that is not a DICOM file"
        raise DicomWebError(
            f"the DICOMweb server {reference.server} answered the request for instance "
            f"{entry.uid} with {what}; nothing was saved."
        )
