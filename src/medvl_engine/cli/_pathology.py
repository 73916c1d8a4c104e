"""Shared steps of the pathology commands: the slide and feature options handed to
:mod:`medvl_engine.pathology`, the heatmap output options and writing them, progress lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medvl_engine.cli._heatmap_dicom import (
    DICOM_KINDS,
    DICOM_SUFFIXES,
    PYRAMID_LEVEL_NAMES,
    add_dicom_arguments,
    check_dicom_options,
    dicom_heatmap_outputs,
    dicomize_for_outputs,
    top_annotations_path,
    write_dicom_heatmap,
)

__all__ = [
    "DICOM_KINDS",
    "DICOM_SUFFIXES",
    "PYRAMID_LEVEL_NAMES",
    "add_dicom_arguments",
    "add_feature_arguments",
    "add_output_arguments",
    "add_rendering_arguments",
    "check_dicom_heatmap_outputs",
    "dicom_heatmap_outputs",
    "dicomize_for_outputs",
    "feature_options",
    "open_checked_slide",
    "print_model_notice",
    "print_reader_notes",
    "progress_printer",
    "report_features",
    "top_annotations_path",
    "write_outputs",
]


def add_feature_arguments(parser: argparse.ArgumentParser) -> None:
    """``--features`` (a medvl store, TRIDENT/CLAM .h5 or CLAM .pt), ``--coords``, patch size."""
    parser.add_argument(
        "--features",
        type=Path,
        default=None,
        help="features of this slide: a medvl store (.zarr), a TRIDENT/CLAM .h5 or a CLAM .pt",
    )
    parser.add_argument(
        "--coords",
        type=Path,
        default=None,
        help="coordinates .h5 of a CLAM .pt file (default: <stem>.h5 beside it or in h5_files)",
    )
    parser.add_argument(
        "--patch-size-level0",
        type=int,
        default=None,
        metavar="PX",
        help="patch side in level-0 px, for a .h5/.pt whose attributes do not give it",
    )


def open_checked_slide(args: argparse.Namespace) -> Any:
    """The open slide of ``args.slide``, its reader notes said on stderr; ``--coords`` and
    ``--patch-size-level0`` are refused without ``--features`` (they describe that file).
    The caller closes the slide."""
    from medvl_engine.errors import ConfigError
    from medvl_engine.io.slide import open_slide

    if args.features is None and (args.coords is not None or args.patch_size_level0 is not None):
        raise ConfigError(
            "--coords and --patch-size-level0 describe a .h5/.pt file given with --features; "
            "add --features FILE or leave them out."
        )
    _local_slide(args)
    slide = open_slide(args.slide)
    print_reader_notes(slide)
    return slide


def _local_slide(args: argparse.Namespace) -> None:
    """A ``dicomweb://`` slide (a series on a PACS, or a study with one) is retrieved into the
    cache and ``args.slide`` becomes its level-0 file; a local slide is left as it is.
    (argparse's Path keeps one slash after the scheme: ``dicomweb:/HOST:PORT/...``.)"""
    import re

    from medvl_engine.io.dicomweb import fetch_slide, is_dicomweb_reference

    text = re.sub(r"^([A-Za-z]+):/(?!/)", r"\1://", str(args.slide))
    if is_dicomweb_reference(text) and not Path(str(args.slide)).exists():
        from medvl_engine.cli._dicomweb import timeout_of

        args.slide = fetch_slide(text, timeout_of(args))


def feature_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine's keyword arguments for the features of ``args`` (``--features``,
    ``--coords``, ``--patch-size-level0``, ``--device``) and a progress line while features
    are extracted."""
    return {
        "features": args.features,
        "features_coords": args.coords,
        "patch_size_level0": args.patch_size_level0,
        "device": args.device,
        "progress": progress_printer("features") if args.features is None else None,
    }


def report_features(args: argparse.Namespace, store: Any, model: str, extracted: bool) -> None:
    """End the features progress line; say when ``--features`` came from another encoder than
    ``model``; refuse a slide without tissue patches (DataError) before anything is written."""
    from medvl_engine.errors import DataError

    if extracted:
        print(file=sys.stderr)
    elif store.encoder and store.encoder != model:
        print(
            f"medvl: note: {Path(args.features).name} was extracted with {store.encoder}; "
            f"prompts are encoded with {model}, which must share its embedding space.",
            file=sys.stderr,
        )
    if store.n_patches == 0:
        raise DataError(
            f"{Path(args.slide).name}: no patch holds enough tissue to score; check the "
            "slide is not blank, or run `medvl features --min-tissue` with a lower value "
            "and pass the store with --features.",
            args.slide,
        )


def print_reader_notes(image: Any) -> None:
    """Say on stderr what a reader chose in the user's stead for a slide or mammogram (an
    impossible pixel size read as unknown, a blank image): one ``medvl: note:`` line each."""
    from medvl_engine.common.console import printable

    properties = getattr(image, "properties", None) or {}
    name = Path(str(getattr(image, "path", "image"))).name
    for key in sorted(properties):
        if key.startswith("medvl.") and key.endswith("_warning") and properties[key]:
            print(
                f"medvl: note: {printable(name)}: {printable(str(properties[key]))}.",
                file=sys.stderr,
            )


def progress_printer(label: str) -> Callable[[int, int], None]:
    """A progress callback ``(done, total)`` that rewrites one stderr line "label: done/total"."""

    def show(done: int, total: int) -> None:
        print(f"\r{label}: {done}/{total} patches", end="", file=sys.stderr, flush=True)

    return show


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out`` (repeatable) for the heatmap commands."""
    parser.add_argument(
        "--out",
        action="append",
        required=True,
        type=Path,
        help="output file (.geojson .png .jpg .tiff .npz .csv); repeat for several",
    )


def add_rendering_arguments(parser: argparse.ArgumentParser) -> None:
    """How a heatmap is written: top patches, GeoJSON style, PNG/JPEG size, level, colormap."""
    parser.add_argument("--top", type=int, default=0, help="also export the N best patches")
    parser.add_argument("--geojson-style", choices=("tiles", "contours"), default="tiles")
    parser.add_argument(
        "--levels",
        nargs="+",
        type=float,
        default=None,
        help="iso-contour levels for --geojson-style contours",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="GeoJSON tiles: classes 'score >= T' / 'score < T' instead of 5 score bins",
    )
    parser.add_argument("--max-size", type=int, default=2048, help="longest side of a PNG/JPEG")
    parser.add_argument("--level", type=int, default=None, help="PNG/JPEG at this pyramid level")
    parser.add_argument(
        "--colormap",
        choices=("auto", "viridis", "blue-white-red", "jet", "coolwarm", "gray"),
        default="auto",
        help="auto: viridis, or blue-white-red centred on 0 for signed maps (contrast)",
    )
    parser.add_argument(
        "--tiff-values",
        choices=("rgba", "scores"),
        default="rgba",
        help="TIFF pixels: coloured with transparency (viewing) or float32 scores (analysis)",
    )
    parser.add_argument(
        "--tiff-downsample",
        type=int,
        default=None,
        help="level-0 px per TIFF pixel (default: about 8 um per pixel)",
    )


def write_outputs(
    args: argparse.Namespace,
    heatmap: Any,
    layout: Any,
    slide: Any,
    *,
    dicom_source: Path | None = None,
) -> list[Path]:
    """Write ``heatmap`` to every ``--out`` file (plus ``--top`` boxes) and print each path.

    ``layout`` is the feature store or saved patch layout the heatmap's patches come from
    (coords (x, y), level-0 px); ``slide`` is the open slide or None (no PNG/JPEG backdrop);
    ``dicom_source`` the DICOM series the ``.dcm`` outputs reference in its stead (the
    slide's conversion, see :func:`dicomize_for_outputs`). Returns the paths written.
    """
    from medvl_engine.common.atomic import atomic_group
    from medvl_engine.export import export_heatmap
    from medvl_engine.heatmap import top_patches

    boxes = box_scores = None
    if args.top > 0:
        boxes, box_scores = top_patches(layout, heatmap.scores, args.top)
    written: list[Path] = []
    with atomic_group():  # the outputs are renamed into place together, once all are written
        for out in args.out:
            if out.suffix.lower() in DICOM_SUFFIXES:
                written.extend(
                    write_dicom_heatmap(
                        out,
                        heatmap,
                        slide if dicom_source is None else dicom_source,
                        boxes,
                        box_scores,
                        pyramid=bool(getattr(args, "pyramid", False)),
                        kind=getattr(args, "dicom_kind", "pmap"),
                    )
                )
                continue
            written.append(out)
            export_heatmap(
                out,
                heatmap,
                layout,
                slide=slide,
                boxes=boxes,
                box_scores=box_scores,
                geojson_style=args.geojson_style,
                contour_levels=args.levels,
                threshold=args.threshold,
                max_size=args.max_size,
                level=args.level,
                colormap=args.colormap,
                tiff_values=args.tiff_values,
                tiff_downsample=args.tiff_downsample,
            )
    for out in written:
        print(out)
    print_model_notice(args, (getattr(heatmap, "metadata", None) or {}).get("encoder"))
    return written


def check_dicom_heatmap_outputs(args: argparse.Namespace) -> None:
    """Before any work: the ``.dcm`` outputs and their options are possible for this slide
    (see :func:`medvl_engine.cli._heatmap_dicom.check_dicom_options`)."""
    if any(out.suffix.lower() in DICOM_SUFFIXES for out in args.out):
        _local_slide(args)  # a slide on a PACS: checked as the files retrieved from it
    check_dicom_options(args)


def print_model_notice(args: argparse.Namespace, model: Any = None) -> None:
    """For a demo model, say on stderr that its output is not for diagnosis (stdout keeps
    only the written paths or the table)."""
    import sys

    from medvl_engine.common.model_label import model_display_name
    from medvl_engine.demo_models import demo_notice_for

    model = model or getattr(args, "model", None)
    notice = demo_notice_for(model)
    if notice:
        command = getattr(args, "command", None) or "medvl"
        print(f"medvl {command}: {model_display_name(model)}: {notice}", file=sys.stderr)
