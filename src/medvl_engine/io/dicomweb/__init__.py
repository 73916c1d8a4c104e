"""DICOMweb: studies, series and instances on a PACS, and sending results back to it.

References are URLs, ``dicomweb://HOST:PORT/ROOT[/studies/UID[/series/UID[/instances/UID]]]``
(``dicomwebs://`` for HTTPS; http(s) URLs of the same shape also work). QIDO-RS searches what
is there; WADO-RS retrieves instances into the local cache, where the ordinary readers open
them (so every check of a local file applies); STOW-RS uploads files that were written locally
first, and a failed upload leaves them unchanged to send again. Every failure is a
:class:`DicomWebError` with one sentence (server down, refused, too slow, not DICOM, no CC/MLO
pair). Needs the ``dicomweb-client`` package (``pip install "napari-medvl[dicomweb]"``).
"""

from medvl_engine.io.dicomweb._client import DEFAULT_TIMEOUT_SECONDS
from medvl_engine.io.dicomweb._contents import WSI_SOP_CLASS, RemoteContents, remote_contents
from medvl_engine.io.dicomweb._errors import (
    DicomWebError,
    InvalidReferenceError,
    NoMammoPairError,
    NotDicomError,
    NothingToOpenError,
    NotOnServerError,
    ServerRefusedError,
    ServerTimeoutError,
    ServerUnreachableError,
)
from medvl_engine.io.dicomweb._fetch import fetch
from medvl_engine.io.dicomweb._mammo import mammo_study_pairs, mammo_views, resolve_mammo_study
from medvl_engine.io.dicomweb._query import (
    InstanceEntry,
    SeriesEntry,
    StudyEntry,
    search_instances,
    search_series,
    search_studies,
    study_metadata,
)
from medvl_engine.io.dicomweb._reference import (
    DicomWebReference,
    is_dicomweb_reference,
    parse_reference,
)
from medvl_engine.io.dicomweb._remote_slide import (
    RemoteLevel,
    fetch_slide,
    open_remote_slide,
    open_remote_slide_and_source,
    slide_levels,
    slide_series,
)
from medvl_engine.io.dicomweb._retrieve import cache_folder, retrieve_instances
from medvl_engine.io.dicomweb._send import SendReport, send

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "DicomWebError",
    "DicomWebReference",
    "InstanceEntry",
    "InvalidReferenceError",
    "NoMammoPairError",
    "NotDicomError",
    "NotOnServerError",
    "NothingToOpenError",
    "RemoteContents",
    "RemoteLevel",
    "SendReport",
    "SeriesEntry",
    "ServerRefusedError",
    "ServerTimeoutError",
    "ServerUnreachableError",
    "StudyEntry",
    "WSI_SOP_CLASS",
    "cache_folder",
    "fetch",
    "fetch_slide",
    "is_dicomweb_reference",
    "mammo_study_pairs",
    "mammo_views",
    "open_remote_slide",
    "open_remote_slide_and_source",
    "parse_reference",
    "remote_contents",
    "resolve_mammo_study",
    "retrieve_instances",
    "search_instances",
    "search_series",
    "search_studies",
    "send",
    "slide_levels",
    "slide_series",
    "study_metadata",
]
