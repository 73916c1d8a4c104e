"""QIDO-RS searches: the studies on a server, the series of a study, the instances of a series,
and the WADO-RS metadata of a study (every instance's header, no pixels).

Answers are DICOM JSON (PS3.18 F.2); :func:`json_value` reads one attribute of one answer.
Patient-level fields are kept apart (``patient``) so that callers print them only on request.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from medvl_engine.io.dicomweb._client import client_for, server_errors
from medvl_engine.io.dicomweb._reference import DicomWebReference, valid_uid

__all__ = [
    "InstanceEntry",
    "SeriesEntry",
    "StudyEntry",
    "json_value",
    "search_instances",
    "search_series",
    "search_studies",
    "study_metadata",
]

_PATIENT_FIELDS = ("PatientName", "PatientID", "PatientBirthDate", "AccessionNumber", "StudyDate")
_INSTANCE_FIELDS = (
    "SOPClassUID",
    "Modality",
    "InstanceNumber",
    "ImageLaterality",
    "ViewPosition",
    "NumberOfFrames",
    "Rows",
    "Columns",
)


def json_value(item: dict[str, Any], keyword: str) -> Any:
    """The first value of attribute ``keyword`` in a DICOM JSON object, or None.

    Person names come back as their alphabetic form.
    """
    from pydicom.datadict import tag_for_keyword

    tag = tag_for_keyword(keyword)
    if tag is None:
        return None
    element = item.get(f"{tag:08X}")
    if not isinstance(element, dict):
        return None
    values = element.get("Value")
    if not isinstance(values, list) or not values:
        return None
    value = values[0]
    if isinstance(value, dict) and element.get("vr") == "PN":
        return value.get("Alphabetic")
    return value


def _uid(item: dict[str, Any], keyword: str) -> str | None:
    value = json_value(item, keyword)
    return str(value) if isinstance(value, str) and valid_uid(value) else None


def _count(item: dict[str, Any], keyword: str) -> int | None:
    value = json_value(item, keyword)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _text(item: dict[str, Any], keyword: str) -> str:
    value = json_value(item, keyword)
    return "" if value is None else str(value)


def _patient(item: dict[str, Any]) -> dict[str, str]:
    return {key: _text(item, key) for key in _PATIENT_FIELDS if json_value(item, key) is not None}


@dataclasses.dataclass(frozen=True)
class StudyEntry:
    """One study found by QIDO-RS."""

    uid: str
    modalities: tuple[str, ...]
    series_count: int | None
    instance_count: int | None
    description: str
    patient: dict[str, str]
    """Fields that may identify the patient (name, ID, birth date, accession, study date)."""


@dataclasses.dataclass(frozen=True)
class SeriesEntry:
    """One series of a study found by QIDO-RS."""

    study: str
    uid: str
    modality: str
    number: int | None
    instance_count: int | None
    description: str


@dataclasses.dataclass(frozen=True)
class InstanceEntry:
    """One instance found by QIDO-RS (or read from WADO-RS metadata)."""

    study: str
    series: str
    uid: str
    sop_class: str
    modality: str
    number: int | None
    laterality: str
    view: str
    frames: int | None
    rows: int | None
    columns: int | None

    @classmethod
    def from_json(
        cls, item: dict[str, Any], study: str | None = None, series: str | None = None
    ) -> InstanceEntry | None:
        """The entry for one DICOM JSON answer; None when it lacks valid UIDs."""
        study_uid = _uid(item, "StudyInstanceUID") or study
        series_uid = _uid(item, "SeriesInstanceUID") or series
        instance_uid = _uid(item, "SOPInstanceUID")
        if not (study_uid and series_uid and instance_uid):
            return None
        laterality = _text(item, "ImageLaterality") or _text(item, "Laterality")
        return cls(
            study=study_uid,
            series=series_uid,
            uid=instance_uid,
            sop_class=_text(item, "SOPClassUID"),
            modality=_text(item, "Modality").strip().upper(),
            number=_count(item, "InstanceNumber"),
            laterality=laterality.strip().upper(),
            view=_text(item, "ViewPosition").strip().upper(),
            frames=_count(item, "NumberOfFrames"),
            rows=_count(item, "Rows"),
            columns=_count(item, "Columns"),
        )


def search_studies(reference: DicomWebReference, timeout: float) -> list[StudyEntry]:
    """Every study on the server (QIDO-RS ``/studies``), in the server's order."""
    client = client_for(reference, timeout)
    fields = ["ModalitiesInStudy", "NumberOfStudyRelatedSeries", "NumberOfStudyRelatedInstances"]
    fields += ["StudyDescription", *_PATIENT_FIELDS]
    with server_errors(reference, "searching for studies", timeout):
        answers = client.search_for_studies(fields=fields)
    found = []
    for item in answers:
        uid = _uid(item, "StudyInstanceUID")
        if uid is None:
            continue
        modalities = (item.get("00080061") or {}).get("Value") or []
        found.append(
            StudyEntry(
                uid=uid,
                modalities=tuple(str(m) for m in modalities),
                series_count=_count(item, "NumberOfStudyRelatedSeries"),
                instance_count=_count(item, "NumberOfStudyRelatedInstances"),
                description=_text(item, "StudyDescription"),
                patient=_patient(item),
            )
        )
    return found


def search_series(reference: DicomWebReference, timeout: float) -> list[SeriesEntry]:
    """The series of ``reference.study`` (QIDO-RS ``/studies/UID/series``), by series number."""
    assert reference.study is not None
    client = client_for(reference, timeout)
    fields = ["SeriesDescription", "SeriesNumber", "NumberOfSeriesRelatedInstances"]
    with server_errors(reference, f"searching the series of study {reference.study}", timeout):
        answers = client.search_for_series(reference.study, fields=fields)
    found = []
    for item in answers:
        uid = _uid(item, "SeriesInstanceUID")
        if uid is None:
            continue
        found.append(
            SeriesEntry(
                study=reference.study,
                uid=uid,
                modality=_text(item, "Modality").strip().upper(),
                number=_count(item, "SeriesNumber"),
                instance_count=_count(item, "NumberOfSeriesRelatedInstances"),
                description=_text(item, "SeriesDescription"),
            )
        )
    return sorted(found, key=lambda s: (s.number is None, s.number or 0, s.uid))


def search_instances(reference: DicomWebReference, timeout: float) -> list[InstanceEntry]:
    """The instances under ``reference`` (a study or series; QIDO-RS), by instance number."""
    assert reference.study is not None
    client = client_for(reference, timeout)
    where = f"series {reference.series}" if reference.series else f"study {reference.study}"
    with server_errors(reference, f"searching the instances of {where}", timeout):
        answers = client.search_for_instances(
            study_instance_uid=reference.study,
            series_instance_uid=reference.series,
            fields=list(_INSTANCE_FIELDS),
        )
    found = [InstanceEntry.from_json(item, reference.study, reference.series) for item in answers]
    entries = [entry for entry in found if entry is not None]
    if reference.instance:
        entries = [entry for entry in entries if entry.uid == reference.instance]
    return sorted(entries, key=lambda e: (e.series, e.number is None, e.number or 0, e.uid))


def study_metadata(reference: DicomWebReference, timeout: float) -> list[InstanceEntry]:
    """Every instance of ``reference.study`` from its WADO-RS metadata (full headers, so view
    and laterality are there even when the server's QIDO index lacks them)."""
    assert reference.study is not None
    client = client_for(reference, timeout)
    with server_errors(reference, f"reading the metadata of study {reference.study}", timeout):
        answers = client.retrieve_study_metadata(reference.study)
    found = [InstanceEntry.from_json(item, reference.study) for item in answers]
    return [entry for entry in found if entry is not None]
