"""`medvl segment SLIDE --preset NAME | --class "tumor=tumour,carcinoma" ... --out FILE...`:
a tissue map by prompts, its regions (QuPath GeoJSON), areas (CSV) and a picture (PNG); for
a DICOM whole-slide image also DICOM (``.dcm``: a Segmentation of the map, bulk annotations
of the regions, or both, as ``--dicom-kind`` says)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from medvl_engine.cli._pathology import add_feature_arguments

HELP = (
    "map tissue classes given by prompts: regions (GeoJSON), areas (CSV), class map (PNG); "
    "DICOM Segmentation or annotations for a DICOM slide"
)

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slide", type=Path, nargs="?", help="slide file")
    parser.add_argument(
        "--class",
        dest="classes",
        action="append",
        default=None,
        metavar="NAME[=SYNONYM,...]",
        help="a class and its synonyms, e.g. 'tumor=tumour,carcinoma'; repeat for each class",
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="the classes of an organ preset, with synonyms (e.g. 'breast (SPIDER-C)'; an "
        "unknown name lists them)",
    )
    parser.add_argument(
        "--templates",
        default="conch",
        metavar="conch|none|FILE",
        help="prompt templates each name is put in: CONCH's H&E list (default), none (the names "
        "as they are), or a file (one template with {} per line, or a YAML list)",
    )
    parser.add_argument(
        "--list-templates", action="store_true", help="print the templates and exit"
    )
    parser.add_argument("--model", default="medvl-demo", help="registry name, folder or HF id")
    add_feature_arguments(parser)
    parser.add_argument(
        "--overlap",
        type=int,
        choices=(1, 2, 4),
        default=1,
        help="patches every 1, 1/2 or 1/4 of their side (finer map, 4 or 16 times the patches)",
    )
    parser.add_argument(
        "--min-confidence",
        type=float,
        default=None,
        help="cells whose best class is less probable are 'uncertain' (default 0.5)",
    )
    parser.add_argument(
        "--logit-scale", type=float, default=None, help="softmax scale (default: the model's)"
    )
    parser.add_argument(
        "--min-area", type=float, default=None, help="smallest region kept, um^2 (default 1e4)"
    )
    parser.add_argument("--smooth", type=float, default=0.5, help="outline smoothing, in cells")
    parser.add_argument(
        "--out",
        action="append",
        type=Path,
        default=None,
        help="output file (.geojson regions, .csv areas, .png class map, .dcm DICOM for a DICOM "
        "slide, see --dicom-kind); repeat for several",
    )
    parser.add_argument(
        "--dicom-kind",
        choices=("seg", "ann", "both"),
        default="seg",
        help="what a .dcm output holds: seg, a Segmentation of the class map (one segment per "
        "class); ann, bulk annotations of the regions (one group per class, polygons with "
        "their area); both, the Segmentation and the annotations beside it as <stem>_ann.dcm",
    )
    parser.add_argument("--max-size", type=int, default=2048, help="longest side of the PNG")
    parser.add_argument("--json", action="store_true", help="print the area table as JSON")
    parser.add_argument("--device", default="cpu")


def run(args: argparse.Namespace) -> int:
    from medvl_engine.errors import ConfigError
    from medvl_engine.prompts import parse_class, preset_classes, resolve_templates

    templates = resolve_templates(args.templates)
    if args.list_templates:
        for template in templates or ("{}",):
            print(template)
        return 0
    if args.slide is None:
        raise ConfigError("Give the slide to segment: medvl segment SLIDE --preset NAME ...")
    if (args.classes is None) == (args.preset is None):
        raise ConfigError("Give the classes with --class NAME ... or --preset NAME (one of them).")
    if args.preset is not None:
        classes = preset_classes(args.preset)
    else:
        classes = dict(parse_class(spec) for spec in args.classes)
        if len(classes) != len(args.classes):
            raise ConfigError("Two --class options name the same class; give each class once.")
    if len(classes) < 2:
        raise ConfigError(
            f"Segmenting needs at least two classes to choose between, got {len(classes)}: "
            "add the tissue it should be told apart from."
        )
    outs = _checked_outputs(args)
    from medvl_engine.cli._pathology import (
        feature_options,
        open_checked_slide,
        print_model_notice,
        report_features,
    )
    from medvl_engine.common.atomic import atomic_group
    from medvl_engine.export.dicom.wsi_segment import DICOM_SUFFIXES, export_segmentation_dicom
    from medvl_engine.export.regions import export_segmentation
    from medvl_engine.pathology import segment

    with open_checked_slide(args) as slide:
        result = segment(
            slide,
            classes,
            args.model,
            templates=templates,
            overlap=args.overlap,
            min_confidence=args.min_confidence,
            logit_scale=args.logit_scale,
            min_area_um2=args.min_area,
            smooth=args.smooth,
            **feature_options(args),
        )
        report_features(args, result.store, result.model, result.extracted)
        for note in result.notes:
            print(f"medvl: note: {note}", file=sys.stderr)
        written = []
        with atomic_group():
            for out in outs:
                if out.suffix.lower() in DICOM_SUFFIXES:
                    written.extend(
                        export_segmentation_dicom(out, result, slide, kind=args.dicom_kind)
                    )
                else:
                    written.append(export_segmentation(out, result, slide, max_size=args.max_size))
    _print_table(result.table, args.json)
    for out in written:
        print(out)
    print_model_notice(args, result.model)
    return 0


def _checked_outputs(args: argparse.Namespace) -> list[Path]:
    from medvl_engine.errors import ConfigError
    from medvl_engine.export.dicom.wsi_segment import DICOM_SUFFIXES, annotations_path
    from medvl_engine.export.input_guard import check_outputs_spare_inputs
    from medvl_engine.export.regions import REGION_SUFFIXES

    outs = list(args.out or [])
    suffixes = (*REGION_SUFFIXES, *DICOM_SUFFIXES)
    for out in outs:
        if out.suffix.lower() not in suffixes:
            raise ConfigError(
                f"Output {out.name} has an unknown type '{out.suffix}'; use one of "
                f"{', '.join(suffixes)}."
            )
    dicom = [out for out in outs if out.suffix.lower() in DICOM_SUFFIXES]
    beside = [annotations_path(out) for out in dicom] if args.dicom_kind == "both" else []
    inputs = [args.slide, args.features, args.coords]
    if args.templates not in ("conch", "none"):
        inputs.append(Path(args.templates))
    check_outputs_spare_inputs([*outs, *beside], inputs)
    if dicom:
        _check_dicom_slide(args.slide, dicom)
    return outs


def _check_dicom_slide(slide: Path, outputs: list[Path]) -> None:
    """Before any work: refuse ``.dcm`` outputs for a slide that is not a DICOM WSI, or
    without highdicom (one sentence each)."""
    from medvl_engine.export.dicom.common import require_highdicom
    from medvl_engine.export.dicom.wsi_source import require_dicom_slide

    for out in outputs:
        require_dicom_slide(slide, out, remedy="write the regions as GeoJSON, CSV or PNG instead")
    require_highdicom()


def _print_table(table: list[dict[str, object]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(table))
        return
    width = max(len(str(row["class"])) for row in table)
    unit = "um^2" if table and table[0]["area_um2"] is not None else "px^2"
    print(f"{'class':<{width}}  {'area ' + unit:>14}  {'tissue':>7}  regions")
    for row in table:
        area = row["area_um2"] if row["area_um2"] is not None else row["area_px2"]
        share = 100 * float(row["share_of_tissue"])  # type: ignore[arg-type]
        print(f"{row['class']!s:<{width}}  {float(area):>14,.0f}  {share:>6.1f}%  {row['regions']}")  # type: ignore[arg-type]
