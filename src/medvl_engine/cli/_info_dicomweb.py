"""`medvl info dicomweb://...`: what a DICOMweb server holds, and what its images are.

A server root lists its studies, a study its series (and the CC/MLO pairs a TopK run would
use), and a series or instance is retrieved into the cache and described like a local file.
UIDs are shown (they are the addresses to give back to medvl); descriptions, patient fields
and dates only with ``--identifying``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from medvl_engine.io.dicomweb import (
    DicomWebReference,
    NotOnServerError,
    mammo_views,
    parse_reference,
    retrieve_instances,
    search_instances,
    search_series,
    search_studies,
)

__all__ = ["FileDescriber", "describe_reference", "format_reference"]

FileDescriber = Callable[[Path, Literal["slide", "mammogram", "result"]], dict[str, Any]]
"""Describes one local file as a slide, a mammogram or a DICOM result object (``medvl info``'s
own describers)."""


def describe_reference(
    text: str, identifying: bool, timeout: float, describe_file: FileDescriber
) -> list[dict[str, Any]]:
    """One description per thing at ``text``: a server, a study, or each image of a series or
    instance (retrieved into the cache first, then described by ``describe_file``)."""
    reference = parse_reference(text)
    if reference.level == "server":
        return [_server(reference, identifying, timeout)]
    if reference.level == "study":
        return [_study(reference, identifying, timeout)]
    return _images(reference, timeout, describe_file)


def _server(reference: DicomWebReference, identifying: bool, timeout: float) -> dict[str, Any]:
    studies = []
    for study in search_studies(reference, timeout):
        entry: dict[str, Any] = {
            "study": reference.at(study.uid).text(),
            "modalities": list(study.modalities),
            "series": study.series_count,
            "instances": study.instance_count,
        }
        if identifying:
            entry["description"] = study.description
            entry["patient_data"] = study.patient
        studies.append(entry)
    return {"reference": reference.text(), "kind": "DICOMweb server", "studies": studies}


def _study(reference: DicomWebReference, identifying: bool, timeout: float) -> dict[str, Any]:
    series = []
    found_series = search_series(reference, timeout)
    if not found_series:
        raise NotOnServerError(
            f"the DICOMweb server {reference.server} has no study {reference.study}; "
            "check the UID (medvl info on the server root lists its studies)."
        )
    for found in found_series:
        entry: dict[str, Any] = {
            "series": reference.at(found.study, found.uid).text(),
            "modality": found.modality,
            "number": found.number,
            "instances": found.instance_count,
        }
        if identifying:
            entry["description"] = found.description
        series.append(entry)
    views = mammo_views(search_instances(reference, timeout))
    pairs = [side for side in ("R", "L") if len(views.get(side, {})) == 2]
    return {
        "reference": reference.text(),
        "kind": "study",
        "series": series,
        "cc_mlo_pairs": pairs,
    }


def _images(
    reference: DicomWebReference, timeout: float, describe_file: FileDescriber
) -> list[dict[str, Any]]:
    from medvl_engine.io.dicom_results.read import SOP_CLASS_KINDS
    from medvl_engine.io.kind import MAMMOGRAM_MODALITIES

    entries = search_instances(reference, timeout)
    if not entries:
        raise NotOnServerError(
            f"the DICOMweb server {reference.server} has no instances at {reference.text()}; "
            "check the UIDs (medvl info on the server root lists its studies)."
        )
    paths = retrieve_instances(reference, entries, timeout)
    described: list[dict[str, Any]] = []
    slide_done: set[str] = set()
    for entry, path in zip(entries, paths, strict=False):
        if entry.modality == "SM":
            if entry.series in slide_done:  # one description per slide, not per level
                continue
            slide_done.add(entry.series)
            info = describe_file(path, "slide")
        elif entry.modality in MAMMOGRAM_MODALITIES and entry.rows:
            info = describe_file(path, "mammogram")
        elif entry.sop_class in SOP_CLASS_KINDS:
            info = describe_file(path, "result")
        else:
            info = {
                "path": str(path),
                "kind": f"DICOM {entry.modality or '?'} (SOP class {entry.sop_class})",
                "modality": entry.modality,
            }
        described.append(
            {"reference": reference.at(entry.study, entry.series, entry.uid).text(), **info}
        )
    return described


def format_reference(info: dict[str, Any]) -> str | None:
    """The text of a server or study description; None for an image (cmd_info formats it)."""
    if info.get("kind") == "DICOMweb server":
        lines = [f"{info['reference']}: {len(info['studies'])} stud(y/ies)"]
        for study in info["studies"]:
            lines.append(
                f"  {study['study']}\n    {', '.join(study['modalities']) or '?'}, "
                f"{study['series']} series, {study['instances']} instance(s)"
                + (f", {study['description']!r}" if study.get("description") else "")
            )
            for key, value in (study.get("patient_data") or {}).items():
                lines.append(f"    {key}: {value}")
        return "\n".join(lines)
    if info.get("kind") == "study":
        lines = [f"{info['reference']}: {len(info['series'])} series"]
        for series in info["series"]:
            number = "" if series["number"] is None else f" #{series['number']}"
            lines.append(
                f"  {series['series']}\n    {series['modality']}{number}, "
                f"{series['instances']} instance(s)"
                + (f", {series['description']!r}" if series.get("description") else "")
            )
        pairs = info["cc_mlo_pairs"]
        lines.append(
            f"  CC + MLO pairs (medvl topk): {', '.join(pairs)}" if pairs else "  no CC + MLO pair"
        )
        return "\n".join(lines)
    return None
