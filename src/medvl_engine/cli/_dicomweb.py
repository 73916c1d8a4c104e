"""Command-line pieces for DICOMweb: ``--send URL`` on result-writing commands, ``--timeout``.

A command that writes results adds :func:`add_send_options`, checks the reference with
:func:`checked_send_target` before any work (a bad URL stops it at once, exit 2), writes its
files locally as always, then calls :func:`send_written`: the DICOM files among them go to the
server with STOW-RS. If that fails the files stay where they were written and the one-line
error says so (exit 2); ``medvl send FILE... --to URL`` sends them later.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from medvl_engine.io.dicomweb import DicomWebReference, SendReport

__all__ = [
    "add_send_options",
    "add_timeout_option",
    "checked_send_target",
    "dicom_files",
    "print_sent",
    "send_written",
    "timeout_of",
    "topk_views",
]


TIMEOUT_HELP_SECONDS = 30
"""The default ``--timeout`` as its help states it (the engine's DEFAULT_TIMEOUT_SECONDS; the
parser is built without importing the engine's io package, so the number is repeated here)."""


def add_timeout_option(parser: argparse.ArgumentParser) -> None:
    """``--timeout SECONDS`` for each request to a DICOMweb server (read with
    :func:`timeout_of`)."""
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait for each answer of a DICOMweb server "
        f"(default {TIMEOUT_HELP_SECONDS})",
    )


def timeout_of(args: argparse.Namespace) -> float:
    """The ``--timeout`` given, else the engine's default; ConfigError unless positive."""
    from medvl_engine.errors import ConfigError
    from medvl_engine.io.dicomweb import DEFAULT_TIMEOUT_SECONDS

    timeout = getattr(args, "timeout", None)
    if timeout is None:
        return DEFAULT_TIMEOUT_SECONDS
    if not timeout > 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {timeout}.")
    return float(timeout)


def add_send_options(parser: argparse.ArgumentParser) -> None:
    """``--send URL`` and ``--timeout``: upload the DICOM results once written."""
    parser.add_argument(
        "--send",
        metavar="URL",
        help="after writing, upload the DICOM outputs to this DICOMweb server "
        "(dicomweb://HOST:PORT/PATH); if it fails they stay on disk to send later",
    )
    add_timeout_option(parser)


def checked_send_target(args: argparse.Namespace) -> DicomWebReference | None:
    """The parsed ``--send`` reference (None without one); raises InvalidReferenceError early."""
    from medvl_engine.errors import ConfigError

    url = getattr(args, "send", None)
    if not url:
        return None
    timeout_of(args)  # a bad --timeout stops the command before any work too
    from medvl_engine.io.dicomweb import parse_reference

    reference = parse_reference(url)
    if reference.series is not None:
        raise ConfigError(
            f"--send {url} names a series or instance; give the server root or a study."
        )
    return reference


def dicom_files(paths: Iterable[str | Path]) -> list[Path]:
    """The paths among ``paths`` that are DICOM Part 10 files ("DICM" at byte 128)."""
    found = []
    for raw in paths:
        path = Path(raw)
        try:
            with path.open("rb") as handle:
                handle.seek(128)
                if handle.read(4) == b"DICM":
                    found.append(path)
        except OSError:
            continue
    return found


def print_sent(report: SendReport, reference: DicomWebReference) -> None:
    """ "sent N file(s) to SERVER", then the reference of each study they belong to."""
    print(f"sent {len(report.sent)} file(s) to {report.server}")
    for study in report.studies:
        print(f"  {reference.at(study).text()}")


def send_written(
    written: Iterable[str | Path], reference: DicomWebReference | None, timeout: float
) -> None:
    """Upload the DICOM files among ``written`` to ``reference`` (nothing when it is None).

    Raises ConfigError when none of them is DICOM, and the DicomWebError of a failed upload
    (the files stay where they are; its sentence says to send them again).
    """
    if reference is None:
        return
    from medvl_engine.errors import ConfigError
    from medvl_engine.io.dicomweb import send

    files = dicom_files(written)
    if not files:
        raise ConfigError(
            f"--send {reference.text()}: none of the outputs is a DICOM file, and a DICOMweb "
            "server stores DICOM only; add a DICOM output."
        )
    print_sent(send(files, reference, timeout), reference)


def topk_views(
    cc: str, mlo: str | None, breast: str | None, timeout: float
) -> tuple[str, str, str | None]:
    """``(cc_path, mlo_path, breast)`` for `medvl topk`: the two files given, or the CC and
    MLO view of one breast of a study on a PACS (``cc`` = ``dicomweb://.../studies/UID``),
    retrieved into the cache. ``breast`` ("R"/"L") chooses; without it a study with both
    breasts is a ConfigError sentence (nothing retrieved). ``breast`` comes back as used
    (None for files).
    """
    from medvl_engine.errors import ConfigError
    from medvl_engine.io.dicomweb import (
        NoMammoPairError,
        is_dicomweb_reference,
        mammo_study_pairs,
        parse_reference,
        retrieve_instances,
    )

    if not is_dicomweb_reference(cc):
        if mlo is None:
            raise ConfigError(
                "give the MLO view after the CC view, or one study as "
                "dicomweb://HOST:PORT/PATH/studies/UID."
            )
        return cc, mlo, None
    if mlo is not None:
        raise ConfigError("give either the two view files or one dicomweb:// study, not both.")
    reference = parse_reference(cc)
    pairs = mammo_study_pairs(reference, timeout)
    side = breast.upper() if breast else None
    if side is None:
        if len(pairs) > 1:
            raise ConfigError(
                f"study {reference.study} has both breasts; choose one with --breast R or "
                "--breast L."
            )
        (side,) = pairs
    if side not in pairs:
        raise NoMammoPairError(
            f"study {reference.study} on {reference.server} has no CC and MLO view of the "
            f"{'right' if side == 'R' else 'left'} breast (it has: "
            f"{', '.join(sorted(pairs))}); choose --breast {' or '.join(sorted(pairs))}."
        )
    cc_path, mlo_path = retrieve_instances(reference, list(pairs[side]), timeout)
    return str(cc_path), str(mlo_path), side
