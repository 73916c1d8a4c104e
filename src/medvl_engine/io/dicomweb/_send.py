"""STOW-RS: upload DICOM files to a DICOMweb server.

Files are sent as the bytes they are on disk (no decoding and re-encoding), and are only read,
never changed or moved: results are written locally first, and a failed
upload (server down, refused, too slow) leaves them as they were, so the same command can be
run again later (a server keeps one copy of an instance sent twice). Every file is checked to
be DICOM before anything is sent; files go up in batches of about :data:`BATCH_BYTES`; and the
server is asked afterwards whether it lists every instance (a server may answer "stored" for
an instance that one of its filters then drops).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medvl_engine.io.dicomweb._client import (
    DEFAULT_TIMEOUT_SECONDS,
    client_for,
    http_request,
    server_errors,
)
from medvl_engine.io.dicomweb._errors import (
    DicomWebError,
    InvalidReferenceError,
    NotDicomError,
    ServerRefusedError,
)
from medvl_engine.io.dicomweb._parts import join_parts
from medvl_engine.io.dicomweb._reference import DicomWebReference, parse_reference

__all__ = ["BATCH_BYTES", "SendReport", "send"]

BATCH_BYTES = 64 * 1024 * 1024
"""Files are sent in requests of at most this many bytes (one larger file goes alone)."""


@dataclasses.dataclass(frozen=True)
class SendReport:
    """What the server stored: the files, and the studies they belong to."""

    server: str
    sent: tuple[Path, ...]
    studies: tuple[str, ...]
    instances: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class _Header:
    path: Path
    size: int
    study: str
    instance: str


def send(
    paths: Sequence[str | os.PathLike[str]],
    url: str | DicomWebReference,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> SendReport:
    """Upload ``paths`` (DICOM Part 10 files) with STOW-RS to ``url`` (a server root, or a
    study, whose UID every file must carry).

    Raises NotDicomError before anything is sent when a file is missing or not DICOM, and the
    server errors of :mod:`._client` (their sentence says the files are kept unchanged) when
    the server is down, refuses some instances, or does not answer in ``timeout`` s.
    """
    reference = parse_reference(url) if isinstance(url, str) else url
    if reference.series is not None:
        raise InvalidReferenceError(
            f"{reference.text()} names a series or instance; send to the server root or to a "
            "study (.../studies/UID)."
        )
    headers = [_read_header(Path(path)) for path in paths]
    for header in headers:
        if reference.study and header.study != reference.study:
            raise InvalidReferenceError(
                f"{header.path.name} belongs to study {header.study}, not {reference.study}; "
                "send it to the server root instead."
            )
    stored: list[_Header] = []
    try:
        for batch in _batches(headers):
            _store(reference, batch, timeout)
            stored.extend(batch)
        stored = _listed(reference, headers, timeout)
        if len(stored) < len(headers):
            first = next(h for h in headers if h not in stored)
            raise ServerRefusedError(
                f"the DICOMweb server {reference.server} accepted the upload but does not list "
                f"{len(headers) - len(stored)} of the {len(headers)} file(s), {first.path.name} "
                "among them (a filter or quota on the server dropped them)"
            )
    except DicomWebError as error:
        raise type(error)(
            f"{error.message.rstrip('.')}; {len(stored)} of {len(headers)} file(s) were stored, "
            "and every file is kept unchanged: send them again later.",
            error.path,
        ) from error
    return SendReport(
        server=reference.server,
        sent=tuple(h.path for h in headers),
        studies=tuple(dict.fromkeys(h.study for h in headers)),
        instances=tuple(h.instance for h in headers),
    )


def _listed(reference: DicomWebReference, headers: list[_Header], timeout: float) -> list[_Header]:
    """The sent files whose instance the server lists afterwards (QIDO-RS, one search per
    study): some servers answer "stored" for an instance a filter then throws away."""
    client = client_for(reference, timeout)
    present: set[str] = set()
    for study in dict.fromkeys(h.study for h in headers):
        with server_errors(reference, f"checking what study {study} now holds", timeout):
            # every page: a server may answer a search in pages of, say, 100 instances
            answers = client.search_for_instances(
                study, fields=["SOPInstanceUID"], get_remaining=True
            )
        present.update(str((item.get("00080018") or {}).get("Value", [""])[0]) for item in answers)
    return [h for h in headers if h.instance in present]


def _read_header(path: Path) -> _Header:
    import pydicom
    from pydicom.errors import InvalidDicomError

    if not path.is_file():
        raise NotDicomError(f"{path} is not a file; nothing was sent.", path)
    try:
        dataset = pydicom.dcmread(path, stop_before_pixels=True)
    except InvalidDicomError as error:
        raise NotDicomError(
            f"{path.name} is not a DICOM file (no DICM header); nothing was sent.", path
        ) from error
    except Exception as error:  # a damaged or hostile file fails in many ways: one sentence
        raise NotDicomError(
            f"{path.name} could not be read as DICOM ({type(error).__name__}); nothing was sent.",
            path,
        ) from error
    study = str(dataset.get("StudyInstanceUID", ""))
    instance = str(dataset.get("SOPInstanceUID", ""))
    if not study or not instance or "TransferSyntaxUID" not in dataset.file_meta:
        raise NotDicomError(
            f"{path.name} lacks a study UID, instance UID or transfer syntax, which a server "
            "needs to store it; nothing was sent.",
            path,
        )
    return _Header(path=path, size=path.stat().st_size, study=study, instance=instance)


def _batches(headers: list[_Header]) -> list[list[_Header]]:
    batches: list[list[_Header]] = []
    size = 0
    for header in headers:
        if not batches or size + header.size > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(header)
        size += header.size
    return batches


def _store(reference: DicomWebReference, batch: list[_Header], timeout: float) -> None:
    """One STOW-RS request with the bytes of ``batch``'s files, as they are on disk."""
    import pydicom

    body, content_type = join_parts([header.path for header in batch])
    url = f"{reference.root}/studies" + (f"/{reference.study}" if reference.study else "")
    headers = {"Content-Type": content_type, "Accept": "application/dicom+json"}
    with server_errors(reference, f"storing {len(batch)} file(s)", timeout), body:
        answer, _ = http_request("POST", url, headers, timeout, body=body)
        dataset = pydicom.Dataset.from_json(answer.decode()) if answer.strip() else None
    _check_stored(reference, batch, dataset)


def _check_stored(reference: DicomWebReference, batch: list[_Header], answer: Any) -> None:
    """Raise ServerRefusedError unless the STOW answer lists every instance as stored."""
    failed = list(getattr(answer, "FailedSOPSequence", []) or [])
    stored = {
        str(getattr(item, "ReferencedSOPInstanceUID", ""))
        for item in getattr(answer, "ReferencedSOPSequence", []) or []
    }
    missing = [h for h in batch if h.instance not in stored]
    if failed or missing:
        reason = getattr(failed[0], "FailureReason", None) if failed else None
        first = missing[0].path.name if missing else "an instance"
        raise ServerRefusedError(
            f"the DICOMweb server {reference.server} did not store {len(missing) or len(failed)} "
            f"of {len(batch)} file(s), {first} among them"
            + (f" (failure reason 0x{int(reason):04X})" if reason is not None else "")
        )
