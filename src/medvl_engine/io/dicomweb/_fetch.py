"""Whatever a reference points at, as local files in the cache (WADO-RS), opened afterwards
by the ordinary readers, so the same size, tile and header checks apply as for files on disk,
and a second fetch reads from disk only."""

from __future__ import annotations

from pathlib import Path

from medvl_engine.io.dicomweb._client import DEFAULT_TIMEOUT_SECONDS
from medvl_engine.io.dicomweb._errors import InvalidReferenceError, NotOnServerError
from medvl_engine.io.dicomweb._query import search_instances
from medvl_engine.io.dicomweb._reference import DicomWebReference, parse_reference
from medvl_engine.io.dicomweb._retrieve import retrieve_instances

__all__ = ["fetch"]


def _reference(url: str | DicomWebReference) -> DicomWebReference:
    return parse_reference(url) if isinstance(url, str) else url


def fetch(url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[Path]:
    """The local files of every instance under ``url`` (a study, series or instance), retrieved
    with WADO-RS into the cache unless already there; in series, then instance-number order.

    Raises NotOnServerError when nothing is found there, InvalidReferenceError for a bare
    server root.
    """
    reference = _reference(url)
    if reference.level == "server":
        raise InvalidReferenceError(
            f"{reference.text()} names a whole server; add /studies/UID (and /series/UID) to "
            "say what to retrieve."
        )
    entries = search_instances(reference, timeout)
    if not entries:
        raise NotOnServerError(
            f"the DICOMweb server {reference.server} has no instances at {reference.text()}; "
            "check the UIDs (medvl info on the server root lists its studies)."
        )
    return retrieve_instances(reference, entries, timeout)
