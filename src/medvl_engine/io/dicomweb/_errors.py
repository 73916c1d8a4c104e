"""What can go wrong talking to a DICOMweb server, each as one sentence a user can act on."""

from __future__ import annotations

from medvl_engine.errors import ConfigError, DataError, MedVLError, UnsupportedFormatError

__all__ = [
    "DicomWebError",
    "InvalidReferenceError",
    "NoMammoPairError",
    "NotDicomError",
    "NotOnServerError",
    "NothingToOpenError",
    "ServerRefusedError",
    "ServerTimeoutError",
    "ServerUnreachableError",
]


class DicomWebError(MedVLError):
    """A DICOMweb request failed; nothing local was changed."""


class InvalidReferenceError(DicomWebError, ConfigError):
    """The text is not a ``dicomweb://`` (or http/https) reference to a server, study, series
    or instance."""


class ServerUnreachableError(DicomWebError):
    """No connection could be made (refused, unknown host, network down)."""


class ServerTimeoutError(DicomWebError):
    """The server accepted the connection but did not answer in time."""


class ServerRefusedError(DicomWebError):
    """The server answered with an HTTP error or refused some of the instances sent."""


class NotOnServerError(DicomWebError, DataError):
    """The study, series or instance is not on the server."""


class NoMammoPairError(DicomWebError, DataError):
    """A study holds no CC and MLO view of the same breast."""


class NotDicomError(DicomWebError, UnsupportedFormatError):
    """A file to send is not a DICOM Part 10 file."""


class NothingToOpenError(DicomWebError, DataError):
    """A study or series holds no image or result object that medvl opens."""
