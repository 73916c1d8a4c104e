"""The DICOM side of the heatmap commands: ``--dicom-kind``, ``--pyramid`` and
``--dicomize`` (a non-DICOM slide converted to the DICOM series the outputs reference), the
checks made before any work, and writing a heatmap as DICOM objects."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "DICOM_KINDS",
    "DICOM_SUFFIXES",
    "PYRAMID_LEVEL_NAMES",
    "add_dicom_arguments",
    "check_dicom_options",
    "dicom_heatmap_outputs",
    "dicomize_for_outputs",
    "top_annotations_path",
    "write_dicom_heatmap",
]

DICOM_SUFFIXES = (".dcm",)
"""Heatmap outputs written as DICOM (a Parametric Map; DICOM whole-slide images only)."""

DICOM_KINDS = ("pmap", "seg")
"""``--dicom-kind``: a ``.dcm`` map as a Parametric Map or a FRACTIONAL Segmentation."""

PYRAMID_LEVEL_NAMES = 16
"""``--pyramid`` levels whose file names (``<stem>-level<l>.dcm``) are checked against the
inputs before any work: more than a map of 2^28 cells needs to fit one 256 x 256 tile."""

_DICOMIZE_DEFAULT = ""


def add_dicom_arguments(parser: argparse.ArgumentParser) -> None:
    """How a ``.dcm`` heatmap output is written: ``--dicomize [DIR]`` (convert a non-DICOM
    slide to the DICOM series the outputs reference) and ``--pyramid``."""
    parser.add_argument(
        "--dicomize",
        nargs="?",
        const=_DICOMIZE_DEFAULT,
        default=None,
        metavar="DIR",
        help="for a .dcm output of a non-DICOM slide (SVS, NDPI, TIFF): convert the slide to a "
        "DICOM whole-slide series in DIR (default: <slide stem>_dicom beside the output), "
        "which the outputs reference",
    )
    parser.add_argument(
        "--dicom-kind",
        choices=DICOM_KINDS,
        default="pmap",
        help="what a .dcm map is: pmap, a float32 Parametric Map of the scores; seg, a "
        "FRACTIONAL Segmentation (scores scaled to 0..1 over the display range)",
    )
    parser.add_argument(
        "--pyramid",
        action="store_true",
        help="write a .dcm map as a pyramid: coarser levels halved until one 256 x 256 tile "
        "holds the map, as <stem>-level<l>.dcm beside it",
    )


def dicom_heatmap_outputs(args: argparse.Namespace) -> list[Path]:
    """The files the ``.dcm`` outputs of ``args.out`` write beside themselves: the
    ``<stem>_top.dcm`` bulk annotations when ``--top`` gives boxes, the ``--pyramid`` levels
    (every name a level could take) and the ``--dicomize`` folder."""
    outputs = [out for out in args.out if out.suffix.lower() in DICOM_SUFFIXES]
    extra = [top_annotations_path(out) for out in outputs] if args.top > 0 else []
    if getattr(args, "pyramid", False):
        extra += [
            out.with_name(f"{out.stem}-level{level}{out.suffix}")
            for out in outputs
            for level in range(1, PYRAMID_LEVEL_NAMES + 1)
        ]
    folder = _dicomize_folder(args)
    return extra + ([folder] if folder is not None else [])


def _dicomize_folder(args: argparse.Namespace) -> Path | None:
    """The folder ``--dicomize`` converts the slide into (None without the option or a
    ``.dcm`` output)."""
    given = getattr(args, "dicomize", None)
    outputs = [out for out in args.out if out.suffix.lower() in DICOM_SUFFIXES]
    if given is None or not outputs:
        return None
    if given != _DICOMIZE_DEFAULT:
        return Path(given)
    from medvl_engine.export.dicom.dicomize import default_dicomized_folder

    return default_dicomized_folder(args.slide, outputs[0])


def top_annotations_path(out: Path) -> Path:
    """``<stem>_top.dcm`` beside the Parametric Map ``out``: the top patches' annotations."""
    return out.with_name(f"{out.stem}_top{out.suffix}")


def check_dicom_options(args: argparse.Namespace) -> None:
    """Before any work: refuse ``.dcm`` outputs for a slide that is not a DICOM WSI unless
    ``--dicomize`` converts it, ``--dicomize`` for a DICOM slide or into an unusable folder,
    ``--dicomize``/``--pyramid`` without a ``.dcm`` output, or a missing highdicom or
    wsidicomizer (one sentence each)."""
    from medvl_engine.errors import ConfigError

    outputs = [out for out in args.out if out.suffix.lower() in DICOM_SUFFIXES]
    asked = [
        option
        for option, value in (
            ("--dicomize", getattr(args, "dicomize", None) is not None),
            ("--pyramid", getattr(args, "pyramid", False)),
        )
        if value
    ]
    if getattr(args, "dicom_kind", "pmap") != "pmap":
        asked.append("--dicom-kind")
    if not outputs:
        if asked:
            raise ConfigError(
                f"{asked[0]} shapes a DICOM output; add --out FILE.dcm or leave {asked[0]} out."
            )
        return
    if getattr(args, "pyramid", False) and getattr(args, "dicom_kind", "pmap") != "pmap":
        raise ConfigError(
            "--pyramid writes a Parametric Map pyramid; leave it out with --dicom-kind seg."
        )
    from medvl_engine.export.dicom import require_highdicom
    from medvl_engine.export.dicom.wsi_source import require_dicom_slide

    folder = _dicomize_folder(args)
    if folder is None:
        for out in outputs:
            require_dicom_slide(
                args.slide,
                out,
                remedy="convert it to DICOM beside the output with --dicomize, or write a "
                "TIFF, PNG or GeoJSON instead",
            )
        require_highdicom()
        return
    _check_dicomize(args, outputs, folder)
    require_highdicom()


def _check_dicomize(args: argparse.Namespace, outputs: list[Path], folder: Path) -> None:
    """``--dicomize``: the slide is not DICOM, ``folder`` is new or empty and holds no
    ``.dcm`` output (the outputs would be read as part of the converted series)."""
    from medvl_engine.errors import ConfigError, ExportError
    from medvl_engine.export.dicom.dicomize import check_dicomize_folder, require_wsidicomizer
    from medvl_engine.export.dicom.wsi_source import require_dicom_slide

    try:
        require_dicom_slide(args.slide, outputs[0])
    except ExportError:
        pass  # not DICOM: what --dicomize is for
    else:
        raise ConfigError(
            f"{Path(args.slide).name} is already a DICOM whole-slide image; leave out --dicomize."
        )
    resolved = folder.resolve()
    for out in outputs:
        if resolved == out.resolve() or resolved in out.resolve().parents:
            raise ConfigError(
                f"{out} lies inside the --dicomize folder {folder}, where it would be read as "
                "part of the converted slide; write it to another folder."
            )
    check_dicomize_folder(args.slide, folder)
    require_wsidicomizer()


def dicomize_for_outputs(args: argparse.Namespace) -> Path | None:
    """Convert ``args.slide`` for ``--dicomize`` (after :func:`check_dicom_heatmap_outputs`)
    into its folder, saying so on stderr; returns the folder (None without ``--dicomize`` or
    a ``.dcm`` output)."""
    folder = _dicomize_folder(args)
    if folder is None:
        return None
    from medvl_engine.common.console import printable
    from medvl_engine.export.dicom.dicomize import dicomize_slide

    print(
        f"medvl: converting {printable(Path(args.slide).name)} to DICOM in "
        f"{printable(str(folder))}",
        file=sys.stderr,
    )
    return dicomize_slide(args.slide, folder)


def write_dicom_heatmap(
    out: Path,
    heatmap: Any,
    slide: Any,
    boxes: Any,
    box_scores: Any,
    *,
    pyramid: bool = False,
    kind: str = "pmap",
) -> list[Path]:
    """The heatmap at ``out`` as a Parametric Map (``kind`` "pmap"; with ``pyramid``, its
    coarser levels beside it) or a FRACTIONAL Segmentation ("seg") and, with boxes, the top
    patches as Microscopy Bulk Simple Annotations beside it; ``slide`` is the DICOM slide
    (open, or its path)."""
    from medvl_engine.export.dicom import (
        write_heatmap_parametric_map_pyramid,
        write_top_patches_annotations,
    )
    from medvl_engine.export.dicom.wsi_seg import write_heatmap_segmentation

    if slide is None:
        from medvl_engine.errors import ExportError

        raise ExportError(
            f"Cannot write {out.name}: a DICOM output needs the DICOM slide the map was "
            "computed on; pass it with --slide.",
            out,
        )
    if kind == "seg":
        written = [write_heatmap_segmentation(out, heatmap, slide)]
    else:
        written = write_heatmap_parametric_map_pyramid(
            out, heatmap, slide, levels=None if pyramid else 1
        )
    if boxes is not None and len(boxes):
        written.append(
            write_top_patches_annotations(
                top_annotations_path(out),
                boxes,
                box_scores,
                slide,
                prompt=getattr(heatmap, "prompt", ""),
                mode=getattr(heatmap, "mode", "cosine"),
                model=(getattr(heatmap, "metadata", None) or {}).get("encoder"),
            )
        )
    return written
