"""``dicomweb://host:port/path[/studies/UID[/series/UID[/instances/UID]]]`` references.

``dicomweb://`` means plain HTTP and ``dicomwebs://`` HTTPS; ``http://`` and ``https://`` URLs
of the same shape are taken as they are. Everything before ``/studies`` is the server's
DICOMweb root (``/dicom-web`` on Orthanc). UIDs are checked to be DICOM UIDs (digits and dots,
at most 64 characters), so that they can name files in the local cache.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal
from urllib.parse import urlsplit

from medvl_engine.io.dicomweb._errors import InvalidReferenceError

__all__ = ["DicomWebReference", "is_dicomweb_reference", "parse_reference", "valid_uid"]

_SCHEMES = {"dicomweb": "http", "dicomwebs": "https", "http": "http", "https": "https"}
_UID = re.compile(r"^(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))*$")
_LEVELS = ("studies", "series", "instances")

Level = Literal["server", "study", "series", "instance"]


def valid_uid(text: str) -> bool:
    """True when ``text`` is a DICOM UID: dot-separated numbers, at most 64 characters."""
    return len(text) <= 64 and bool(_UID.match(text))


@dataclasses.dataclass(frozen=True)
class DicomWebReference:
    """A DICOMweb server root and, optionally, a study, series and instance on it."""

    root: str
    """The server's DICOMweb root as an http(s) URL without a trailing slash."""
    study: str | None = None
    series: str | None = None
    instance: str | None = None

    @property
    def level(self) -> Level:
        """What the reference points at: the whole server, a study, a series or an instance."""
        if self.instance:
            return "instance"
        if self.series:
            return "series"
        return "study" if self.study else "server"

    @property
    def server(self) -> str:
        """``host:port`` for sentences."""
        return urlsplit(self.root).netloc

    def text(self) -> str:
        """The reference written back as a ``dicomweb://`` (or ``dicomwebs://``) URL."""
        scheme, rest = self.root.split("://", 1)
        parts = [("dicomwebs" if scheme == "https" else "dicomweb") + "://" + rest]
        for name, uid in zip(_LEVELS, (self.study, self.series, self.instance), strict=True):
            if uid:
                parts.append(f"{name}/{uid}")
        return "/".join(parts)

    def at(
        self, study: str, series: str | None = None, instance: str | None = None
    ) -> DicomWebReference:
        """The same server, pointing at ``study`` (and ``series``, ``instance``)."""
        return DicomWebReference(self.root, study, series, instance)


def is_dicomweb_reference(text: str) -> bool:
    """True when ``text`` starts with a scheme this module reads (dicomweb, dicomwebs, http(s))."""
    scheme, separator, _ = str(text).partition("://")
    return bool(separator) and scheme.lower() in _SCHEMES


def parse_reference(text: str) -> DicomWebReference:
    """Split a ``dicomweb://`` or http(s) URL into the server root and study/series/instance.

    Raises InvalidReferenceError (one sentence) for another scheme, a missing host, user
    credentials, a query or fragment, or a path after ``/studies`` that is not
    ``UID[/series/UID[/instances/UID]]``.
    """
    raw = str(text).strip()
    if not is_dicomweb_reference(raw):
        raise InvalidReferenceError(
            f"{raw!r} is not a DICOMweb reference; write dicomweb://HOST:PORT/PATH, optionally "
            "followed by /studies/UID, /series/UID and /instances/UID."
        )
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as error:
        raise InvalidReferenceError(f"{raw!r} is not a valid URL ({error}).") from error
    if not parts.hostname:
        raise InvalidReferenceError(f"{raw!r} names no server; write dicomweb://HOST:PORT/PATH.")
    if parts.username or parts.password:
        raise InvalidReferenceError(
            f"the DICOMweb reference for {parts.hostname} holds a user name or password; "
            "credentials in URLs are not accepted (they would be printed and logged)."
        )
    if parts.query or parts.fragment:
        raise InvalidReferenceError(
            f"{raw!r} has a query or fragment; give the server root and study/series/instance "
            "UIDs only."
        )
    segments = [segment for segment in parts.path.split("/") if segment]
    start = segments.index("studies") if "studies" in segments else len(segments)
    tail = segments[start:]
    uids: list[str] = []
    for position in range(0, len(tail), 2):
        name = tail[position]
        expected = _LEVELS[position // 2] if position // 2 < len(_LEVELS) else None
        if name != expected or position + 1 >= len(tail):
            raise InvalidReferenceError(
                f"{raw!r}: after the server root the path must be studies/UID, then "
                "series/UID, then instances/UID."
            )
        uid = tail[position + 1]
        if not valid_uid(uid):
            raise InvalidReferenceError(
                f"{raw!r}: {uid[:70]!r} is not a DICOM UID (digits and dots, at most 64 "
                "characters)."
            )
        uids.append(uid)
    scheme = _SCHEMES[parts.scheme.lower()]
    netloc = parts.hostname if port is None else f"{parts.hostname}:{port}"
    if ":" in (parts.hostname or "") and port is not None:  # an IPv6 literal keeps its brackets
        netloc = f"[{parts.hostname}]:{port}"
    root_path = "/".join(segments[:start])
    root = f"{scheme}://{netloc}" + (f"/{root_path}" if root_path else "")
    study, series, instance = (uids + [None, None, None])[:3]
    return DicomWebReference(root, study, series, instance)
