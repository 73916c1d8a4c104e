"""One DICOMweb client per call, raw HTTP for whole files, and HTTP failures as one sentence.

dicomweb-client does the searches (QIDO-RS) and metadata (WADO-RS); it gets a timeout and no
automatic retries (a failed call reports at once; the user retries, on the same local files).
Whole files go up and down as bytes (:func:`http_request`, see :mod:`._parts`).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

from medvl_engine.errors import MissingDependencyError
from medvl_engine.io.dicomweb._errors import (
    DicomWebError,
    NotOnServerError,
    ServerRefusedError,
    ServerTimeoutError,
    ServerUnreachableError,
)
from medvl_engine.io.dicomweb._reference import DicomWebReference

if TYPE_CHECKING:
    from dicomweb_client.api import DICOMwebClient

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "client_for", "http_request", "server_errors"]

DEFAULT_TIMEOUT_SECONDS = 30.0
"""How long one request waits for the server to connect and for each answer."""


def client_for(reference: DicomWebReference, timeout: float) -> DICOMwebClient:
    """A DICOMweb client for ``reference``'s root: ``timeout`` s per request, no retries."""
    try:
        from dicomweb_client.api import DICOMwebClient
    except ImportError as error:
        raise MissingDependencyError(
            "talking to a DICOMweb server needs the dicomweb-client package; install it with "
            'pip install "napari-medvl[dicomweb]".'
        ) from error
    client = DICOMwebClient(reference.root, timeout=timeout)
    client.set_http_retry_params(retry=False)
    return client


def http_request(
    method: str,
    url: str,
    headers: dict[str, str],
    timeout: float,
    body: bytes | io.RawIOBase | None = None,
) -> tuple[bytes, str]:
    """``(body, content_type)`` of the answer to one HTTP request (a file-like ``body`` with a
    length is sent a block at a time); raises requests' errors (call inside
    :func:`server_errors`), HTTPError for a 4xx/5xx status."""
    import requests

    response = requests.request(method, url, headers=headers, data=body, timeout=timeout)
    response.raise_for_status()
    return response.content, response.headers.get("Content-Type", "")


@contextlib.contextmanager
def server_errors(reference: DicomWebReference, action: str, timeout: float) -> Iterator[None]:
    """Turn what the HTTP layer raises while doing ``action`` into one DicomWebError sentence.

    ``action`` completes "while ...", e.g. "searching for studies".
    """
    import requests

    server = reference.server
    try:
        yield
    except requests.exceptions.Timeout as error:
        raise ServerTimeoutError(
            f"the DICOMweb server {server} did not answer within {timeout:g} s while {action}; "
            "try again later or allow more time with --timeout."
        ) from error
    except requests.exceptions.ConnectionError as error:
        if "timed out" in repr(error).lower():  # a read that stalled in the middle of an answer
            raise ServerTimeoutError(
                f"the DICOMweb server {server} stopped answering for {timeout:g} s while "
                f"{action}; try again later or allow more time with --timeout."
            ) from error
        raise ServerUnreachableError(
            f"could not connect to the DICOMweb server {server} while {action} "
            f"({_connection_problem(error)}); check that it runs and that the address is right."
        ) from error
    except requests.exceptions.HTTPError as error:
        status = error.response.status_code if error.response is not None else 0
        reason = error.response.reason if error.response is not None else ""
        if status == 404 and reference.level == "server":
            raise NotOnServerError(
                f"{server} has no DICOMweb service at {reference.root} (HTTP 404 while "
                f"{action}); check the path (Orthanc serves it under /dicom-web)."
            ) from error
        if status == 404:
            raise NotOnServerError(
                f"the DICOMweb server {server} has no {reference.level} at "
                f"{reference.text()} (HTTP 404 while {action}); check the UIDs."
            ) from error
        raise ServerRefusedError(
            f"the DICOMweb server {server} refused {action} with HTTP {status}"
            + (f" {reason}" if reason else "")
            + "; check the address and the server's log."
        ) from error
    except requests.exceptions.RequestException as error:
        raise DicomWebError(
            f"the request to the DICOMweb server {server} failed while {action} ({error})."
        ) from error
    except (ValueError, KeyError, TypeError) as error:  # a malformed answer
        raise DicomWebError(
            f"the answer of the DICOMweb server {server} could not be read while {action} "
            f"({type(error).__name__}: {str(error)[:120]})."
        ) from error


def _connection_problem(error: BaseException) -> str:
    """'connection refused', 'unknown host' or 'network error' from a requests error chain."""
    text = repr(error).lower()
    if "refused" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    if "name resolution" in text or "getaddrinfo" in text:
        return "unknown host"
    return "network error"
