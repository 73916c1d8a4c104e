"""`medvl heatmap SLIDE --prompt TEXT --model NAME --out FILE...`: prompt heatmap, headless."""

from __future__ import annotations

import argparse
from pathlib import Path

from medvl_engine.cli._pathology import (
    DICOM_SUFFIXES,
    add_dicom_arguments,
    add_feature_arguments,
    add_output_arguments,
    add_rendering_arguments,
    check_dicom_heatmap_outputs,
    dicom_heatmap_outputs,
    dicomize_for_outputs,
    feature_options,
    open_checked_slide,
    report_features,
    write_outputs,
)
from medvl_engine.prompts import MODES, NORMALIZATIONS, check_prompts

HELP = (
    "score text prompts on a slide and write the heatmap (GeoJSON, PNG/JPEG, TIFF, npz, CSV; "
    "DICOM for a DICOM slide, or any slide with --dicomize)"
)

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slide", type=Path, help="slide file")
    parser.add_argument(
        "--prompt",
        action="append",
        required=True,
        help=(
            "text prompt: one for cosine; repeat for softmax (two or more classes, the first "
            "mapped) or contrast (exactly two: A, then B)"
        ),
    )
    parser.add_argument("--model", default="medvl-demo", help="registry name, folder or HF id")
    add_feature_arguments(parser)
    add_output_arguments(parser)
    parser.add_argument("--mode", choices=MODES, default="cosine")
    parser.add_argument("--normalize", choices=NORMALIZATIONS, default="none")
    parser.add_argument(
        "--range",
        nargs=2,
        type=float,
        default=None,
        metavar=("LOW", "HIGH"),
        help="value range for --normalize fixed",
    )
    parser.add_argument("--temperature", type=float, default=0.01, help="softmax temperature")
    parser.add_argument("--smooth", type=float, default=0.0, help="Gaussian sigma in cells")
    add_rendering_arguments(parser)
    add_dicom_arguments(parser)
    parser.add_argument(
        "--templates",
        default="none",
        metavar="conch|none|FILE",
        help="prompt templates each prompt is put in: none (the prompt as typed), CONCH's H&E "
        "list (conch), or a file (one template with {} per line, or a YAML list)",
    )
    parser.add_argument("--device", default="cpu")
    from medvl_engine.cli._dicomweb import add_send_options

    add_send_options(parser)


def run(args: argparse.Namespace) -> int:
    from medvl_engine.cli._dicomweb import checked_send_target, send_written, timeout_of
    from medvl_engine.errors import ConfigError
    from medvl_engine.export.formats import EXPORT_SUFFIXES
    from medvl_engine.export.input_guard import check_outputs_spare_inputs
    from medvl_engine.prompts import resolve_templates

    suffixes = (*EXPORT_SUFFIXES, *DICOM_SUFFIXES)
    for out in args.out:
        if out.suffix.lower() not in suffixes:
            raise ConfigError(
                f"Output {out.name} has an unknown type '{out.suffix}'; use one of "
                f"{', '.join(suffixes)}."
            )
    target = checked_send_target(args)  # a bad URL stops the command before any work
    check_outputs_spare_inputs(
        [*args.out, *dicom_heatmap_outputs(args)], [args.slide, args.features, args.coords]
    )
    check_prompts(args.prompt, args.mode)
    templates = resolve_templates(args.templates)
    if args.normalize == "fixed" and args.range is None:
        raise ConfigError("--normalize fixed needs --range LOW HIGH.")
    check_dicom_heatmap_outputs(args)
    with open_checked_slide(args) as slide:
        from medvl_engine.pathology import final, prompt_heatmap

        result = final(
            prompt_heatmap(
                slide,
                args.prompt,
                args.model,
                mode=args.mode,
                normalize=args.normalize,
                temperature=args.temperature,
                value_range=tuple(args.range) if args.range else None,
                smooth_sigma=args.smooth,
                partials=False,
                templates=templates if templates is not None else "none",
                **feature_options(args),
            )
        )
        report_features(args, result.store, result.model, result.extracted)
        converted = dicomize_for_outputs(args)  # the DICOM series the .dcm outputs reference
        if converted is not None:
            print(converted)
        written = write_outputs(args, result.heatmap, result.store, slide, dicom_source=converted)
    series = sorted(converted.glob("*.dcm")) if converted is not None else []
    send_written([*series, *written], target, timeout_of(args))
    return 0
