"""What a viewer opens from a study or series on a DICOMweb server, sorted by kind.

Instances are told apart by their SOP Class and Modality from one QIDO-RS search: whole-slide
images (VL Whole Slide Microscopy, one slide per series, left on the server to be opened
lazily), result objects (SR, presentation states, parametric maps, segmentations, bulk
annotations) and mammograms (the modalities the mammogram reader takes), retrieved into the
cache. Anything else (a CT, a waveform) is counted and left on the server.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from medvl_engine.io.dicomweb._client import DEFAULT_TIMEOUT_SECONDS
from medvl_engine.io.dicomweb._errors import (
    InvalidReferenceError,
    NothingToOpenError,
    NotOnServerError,
)
from medvl_engine.io.dicomweb._query import InstanceEntry, search_instances
from medvl_engine.io.dicomweb._reference import DicomWebReference, parse_reference
from medvl_engine.io.dicomweb._retrieve import retrieve_instances

__all__ = ["WSI_SOP_CLASS", "RemoteContents", "remote_contents"]

WSI_SOP_CLASS = "1.2.840.10008.5.1.4.1.1.77.1.6"
"""VL Whole Slide Microscopy Image Storage."""


@dataclasses.dataclass(frozen=True)
class RemoteContents:
    """A study's or series' instances a viewer opens: cached files and slide series."""

    reference: DicomWebReference
    mammograms: list[Path]
    """Cached mammogram files, in series then instance-number order."""
    slides: list[DicomWebReference]
    """One reference per whole-slide series (nothing retrieved yet)."""
    results: list[Path]
    """Cached result objects (SR, GSPS, PM, SEG, ANN)."""
    skipped: int
    """Instances of other kinds, left on the server."""


def _kinds(entries: list[InstanceEntry]) -> tuple[list[InstanceEntry], ...]:
    from medvl_engine.io.dicom_results.read import SOP_CLASS_KINDS
    from medvl_engine.io.kind import MAMMOGRAM_MODALITIES

    slides, results, mammograms, other = [], [], [], []
    for entry in entries:
        if entry.sop_class == WSI_SOP_CLASS:
            slides.append(entry)
        elif entry.sop_class in SOP_CLASS_KINDS:
            results.append(entry)
        elif entry.modality in MAMMOGRAM_MODALITIES:
            mammograms.append(entry)
        else:
            other.append(entry)
    return slides, results, mammograms, other


def remote_contents(
    url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> RemoteContents:
    """The mammograms and results under ``url`` (a study, series or instance), retrieved into
    the cache, and its whole-slide series, left on the server.

    Raises NotOnServerError when nothing is there, NothingToOpenError when none of it is an
    image or result medvl opens, InvalidReferenceError for a bare server root.
    """
    reference = parse_reference(url) if isinstance(url, str) else url
    if reference.level == "server":
        raise InvalidReferenceError(
            f"{reference.text()} names a whole server; add /studies/UID (medvl info on it "
            "lists the studies) to say what to open."
        )
    entries = search_instances(reference, timeout)
    if not entries:
        raise NotOnServerError(
            f"the DICOMweb server {reference.server} has nothing at {reference.text()}; "
            "check the UIDs (medvl info on the server root lists its studies)."
        )
    slides, results, mammograms, other = _kinds(entries)
    if not (slides or results or mammograms):
        modalities = ", ".join(sorted({entry.modality or "?" for entry in other}))
        raise NothingToOpenError(
            f"{reference.text()} holds no mammogram, whole-slide image or result object "
            f"({len(other)} instance(s) of modality {modalities}); open a study of those."
        )
    series = list(dict.fromkeys(entry.series for entry in slides))
    return RemoteContents(
        reference=reference,
        mammograms=retrieve_instances(reference, mammograms, timeout),
        slides=[reference.at(reference.study or slides[0].study, uid) for uid in series],
        results=retrieve_instances(reference, results, timeout),
        skipped=len(other),
    )
