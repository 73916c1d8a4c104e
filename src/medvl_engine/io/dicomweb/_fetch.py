"""Whatever a reference points at, as local files; a whole-slide series opened as a Slide.

A DICOM whole-slide series is read by retrieving its instances (WADO-RS, into the cache) and
opening them with the local DICOM WSI reader, so the same size, tile and header checks apply
as for files on disk, and a second open reads from disk only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from medvl_engine.io.dicomweb._client import DEFAULT_TIMEOUT_SECONDS
from medvl_engine.io.dicomweb._errors import InvalidReferenceError, NotOnServerError
from medvl_engine.io.dicomweb._query import search_instances, search_series
from medvl_engine.io.dicomweb._reference import DicomWebReference, parse_reference
from medvl_engine.io.dicomweb._retrieve import retrieve_instances

if TYPE_CHECKING:
    from medvl_engine.io.slide import Slide

__all__ = ["fetch", "open_remote_slide"]


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


def open_remote_slide(
    url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> Slide:
    """The DICOM whole-slide image (modality SM) at ``url``: a series, or a study that holds
    exactly one SM series. Its instances are retrieved to the cache and opened locally."""
    from medvl_engine.io.slide import open_slide

    reference = _reference(url)
    if reference.level == "study":
        slides = [s for s in search_series(reference, timeout) if s.modality == "SM"]
        if len(slides) != 1:
            raise InvalidReferenceError(
                f"study {reference.study} on {reference.server} holds {len(slides)} slide (SM) "
                "series; give one as .../series/UID."
            )
        reference = reference.at(slides[0].study, slides[0].uid)
    elif reference.level != "series":
        raise InvalidReferenceError(
            f"{reference.text()} does not name a slide; give .../studies/UID/series/UID."
        )
    paths = fetch(reference, timeout)
    return open_slide(paths[0])  # the reader gathers the series' other files beside it
