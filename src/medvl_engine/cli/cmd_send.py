"""`medvl send FILE... --to URL`: upload DICOM files to a DICOMweb server (STOW-RS).

The files are only read: if the server is down, refuses them or answers too slowly, they stay
as they are and the same command can be run again later (a server keeps one copy of an
instance sent twice). Every file is checked to be DICOM before anything is sent.
"""

from __future__ import annotations

import argparse

HELP = "upload DICOM files (results, images) to a DICOMweb server (STOW-RS)"

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from medvl_engine.cli._dicomweb import add_timeout_option

    parser.add_argument("files", nargs="+", metavar="FILE", help="DICOM files to upload")
    parser.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the DICOMweb server: dicomweb://HOST:PORT/PATH (dicomwebs:// for HTTPS), "
        "optionally /studies/UID",
    )
    add_timeout_option(parser)


def run(args: argparse.Namespace) -> int:
    from medvl_engine.cli._dicomweb import print_sent, timeout_of
    from medvl_engine.io.dicomweb import parse_reference, send

    timeout = timeout_of(args)
    reference = parse_reference(args.to)
    print_sent(send(args.files, reference, timeout), reference)
    return 0
