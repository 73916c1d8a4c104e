"""`medvl info PATH...`: what the engine knows of each slide or mammogram.

A PATH may also be a DICOMweb reference, ``dicomweb://HOST:PORT/ROOT[/studies/UID[/series/UID
[/instances/UID]]]``: a server lists its studies, a study its series and CC/MLO pairs, and a
series or instance is retrieved into the cache and described like a local file. A DICOM result
object (SR, presentation state, parametric map, segmentation, bulk annotations) is described
by what it holds and which image it refers to.

By default only technical properties are shown (see :mod:`medvl_engine.common.privacy`): no scan
dates or times, scanner, image or study identifiers, DICOM instance UIDs, patient or
institution fields. ``--identifying`` shows every property and the patient fields.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from medvl_engine.common.console import printable

HELP = "describe slides and mammograms (levels, mpp, laterality, view, VOI, ...)"

__all__ = [
    "HELP",
    "add_arguments",
    "describe_mammogram",
    "describe_result_object",
    "describe_slide",
    "run",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="slide or mammogram files, or dicomweb://HOST:PORT/PATH[/studies/UID[/series/UID]]",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON list instead of text")
    parser.add_argument(
        "--kind",
        choices=("auto", "slide", "mammogram"),
        default="auto",
        help="how to read the files (auto: DICOM by modality, else colour = slide, "
        "grayscale = mammogram)",
    )
    parser.add_argument(
        "--identifying",
        "--show-phi",
        dest="identifying",
        action="store_true",
        help="also print fields that may identify a patient, scan or scanner (names, IDs, "
        "birth date, accession number, scan date and time, scanner and image IDs, UIDs)",
    )
    from medvl_engine.cli._dicomweb import add_timeout_option

    add_timeout_option(parser)


def _properties(
    info: dict[str, Any],
    properties: dict[str, Any],
    private: dict[str, Any],
    identifying: bool,
) -> dict[str, Any]:
    """Add the shown properties (and with ``identifying`` the patient fields) to ``info``."""
    from medvl_engine.common.privacy import split_identifying

    if identifying:
        info["properties"] = _plain(properties)
        info["patient_data"] = _plain(private)
        return info
    shown, withheld = split_identifying(properties)
    info["properties"] = _plain(shown)
    info["withheld_fields"] = len(withheld) + len(private)
    return info


def describe_slide(path: Path, identifying: bool = False) -> dict[str, Any]:
    from medvl_engine.io.slide import open_slide

    with open_slide(path) as slide:
        # decode one corner of the coarsest level, so damaged tile data is reported here
        coarsest = slide.level_count - 1
        width, height = slide.level_dimensions[coarsest]
        slide.read_region((0, 0), coarsest, (min(width, 256), min(height, 256)))
        info: dict[str, Any] = {
            "path": str(path),
            "kind": "slide",
            "vendor": slide.vendor,
            "dimensions": list(slide.dimensions),
            "mpp": list(slide.mpp) if slide.mpp else None,
            "objective_power": slide.objective_power,
            "levels": [
                {
                    "dimensions": list(dims),
                    "downsample": round(down, 4),
                    "chunk": list(level.chunksize[:2]),
                }
                for dims, down, level in zip(
                    slide.level_dimensions, slide.level_downsamples, slide.levels, strict=True
                )
            ],
            "associated_images": sorted(slide.associated_images),
        }
        _properties(info, slide.properties, slide.private_properties, identifying)
    return info


def describe_mammogram(path: Path, identifying: bool = False) -> dict[str, Any]:
    from medvl_engine.io.mammo import open_mammogram

    mammogram = open_mammogram(path, placeholder_ok=True)  # header facts of a placeholder too
    info: dict[str, Any] = {
        "path": str(path),
        "kind": "mammogram",
        "shape": list(mammogram.shape),
        "laterality": mammogram.laterality,
        "view": mammogram.view,
        "pixel_spacing_mm": list(mammogram.pixel_spacing) if mammogram.pixel_spacing else None,
        "modality": mammogram.modality,
        "photometric": mammogram.photometric,
        "presentation_intent": mammogram.presentation_intent,
        "voi": mammogram.voi,
        "voi_choices": mammogram.voi_choices,
    }
    if mammogram.pixel_problem:
        info["pixel_problem"] = mammogram.pixel_problem
    return _properties(info, mammogram.properties, mammogram.private_properties, identifying)


def describe_result_object(path: Path) -> dict[str, Any]:
    """A DICOM result object (SR, presentation state, parametric map, segmentation, bulk
    annotations): its kind, source image and layers, as lines (no patient data)."""
    from medvl_engine.io.dicom_results import describe_dicom_result

    return {"path": str(path), "kind": "DICOM result", "result": describe_dicom_result(path)}


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {
        str(k): v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
        for k, v in values.items()
    }


def _format_text(info: dict[str, Any]) -> str:
    from medvl_engine.cli._info_dicomweb import format_reference

    listing = format_reference(info)
    if listing is not None:
        return printable(listing)
    lines = [f"{info['path']}"]
    for key, value in info.items():
        if key in ("path", "properties", "patient_data", "levels", "withheld_fields", "result"):
            continue
        lines.append(f"  {key}: {value}")
    lines += [f"  {line}" for line in info.get("result", [])]
    for index, level in enumerate(info.get("levels", [])):
        width, height = level["dimensions"]
        lines.append(
            f"  level {index}: {width} x {height} px, downsample {level['downsample']:g}, "
            f"chunk {level['chunk'][1]} x {level['chunk'][0]}"
        )
    for title in ("properties", "patient_data"):
        if info.get(title):
            lines.append(f"  {title}:")
            for key, value in info[title].items():
                text = str(value).replace("\r", " ").replace("\n", " ")
                lines.append(f"    {key}: {text[:200]}")
    if info.get("withheld_fields"):
        lines.append(
            f"  {info['withheld_fields']} more field(s) withheld: they may identify the patient, "
            "scan or scanner (show them with --identifying)"
        )
    return printable("\n".join(lines))


def _describe(raw: str, args: argparse.Namespace, detect_kind: Any) -> list[dict[str, Any]]:
    """The descriptions of one PATH argument: a file, or what a DICOMweb reference points at."""
    from medvl_engine.io.dicomweb import is_dicomweb_reference

    if is_dicomweb_reference(raw):
        from medvl_engine.cli._dicomweb import timeout_of
        from medvl_engine.cli._info_dicomweb import describe_reference

        def describe_file(path: Path, kind: str) -> dict[str, Any]:
            if kind == "result":
                return describe_result_object(path)
            describe = describe_slide if kind == "slide" else describe_mammogram
            return describe(path, args.identifying)

        return describe_reference(raw, args.identifying, timeout_of(args), describe_file)
    path = Path(raw)
    if args.kind == "auto" and path.suffix.lower() in ("", ".dcm", ".dicom"):
        from medvl_engine.io.dicom_results import is_dicom_result

        if path.is_file() and is_dicom_result(path):
            return [describe_result_object(path)]
    kind = args.kind if args.kind != "auto" else detect_kind(path)
    describe = describe_slide if kind == "slide" else describe_mammogram
    return [describe(path, args.identifying)]


def run(args: argparse.Namespace) -> int:
    from medvl_engine.common.console import report_error
    from medvl_engine.errors import MedVLError
    from medvl_engine.io.kind import detect_kind

    status = 0
    described = []
    for raw in args.paths:
        try:
            infos = _describe(raw, args, detect_kind)
        except MedVLError as error:
            if getattr(args, "debug", False):
                raise
            report_error("medvl", error, verbose=getattr(args, "verbose", False))
            status = 2
            continue
        described.extend(infos)
        if not args.json:
            for info in infos:
                print(_format_text(info))
    if args.json:
        print(json.dumps(described, indent=2))
    return status
