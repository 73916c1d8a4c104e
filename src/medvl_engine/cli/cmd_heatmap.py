"""`medvl heatmap SLIDE --prompt TEXT --model NAME --out FILE...`: prompt heatmap, headless."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "score text prompts on a slide and write the heatmap (GeoJSON, PNG/JPEG, TIFF, npz, CSV)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slide", type=Path, help="slide file")
    parser.add_argument(
        "--prompt",
        action="append",
        required=True,
        help="text prompt; repeat for softmax (classes) or contrast (A then B)",
    )
    parser.add_argument("--model", default="medvl-demo", help="registry name, folder or HF id")
    parser.add_argument("--features", type=Path, default=None, help="existing feature store")
    parser.add_argument(
        "--out",
        action="append",
        required=True,
        type=Path,
        help="output file (.geojson .png .jpg .tiff .npz .csv); repeat for several",
    )
    parser.add_argument("--mode", choices=("cosine", "softmax", "contrast"), default="cosine")
    parser.add_argument(
        "--normalize", choices=("none", "percentile", "minmax", "fixed"), default="none"
    )
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
    parser.add_argument("--top", type=int, default=0, help="also export the N best patches")
    parser.add_argument("--geojson-style", choices=("tiles", "contours"), default="tiles")
    parser.add_argument(
        "--levels",
        nargs="+",
        type=float,
        default=None,
        help="iso-contour levels for --geojson-style contours",
    )
    parser.add_argument("--max-size", type=int, default=2048, help="longest side of a PNG/JPEG")
    parser.add_argument("--level", type=int, default=None, help="PNG/JPEG at this pyramid level")
    parser.add_argument("--colormap", choices=("jet", "coolwarm", "gray"), default="jet")
    parser.add_argument("--device", default="cpu")


def run(args: argparse.Namespace) -> int:
    from medvl_engine.cli._pathology import encoder_and_store
    from medvl_engine.errors import ConfigError
    from medvl_engine.export import EXPORT_SUFFIXES, export_heatmap
    from medvl_engine.heatmap import similarity_map, top_patches

    for out in args.out:
        if out.suffix.lower() not in EXPORT_SUFFIXES:
            raise ConfigError(
                f"Output {out.name} has an unknown type '{out.suffix}'; use one of "
                f"{', '.join(EXPORT_SUFFIXES)}."
            )
    if args.mode == "contrast" and len(args.prompt) != 2:
        raise ConfigError("--mode contrast needs exactly two --prompt values (A, then B).")
    if args.mode == "softmax" and len(args.prompt) < 2:
        raise ConfigError("--mode softmax needs at least two --prompt values (the classes).")
    if args.normalize == "fixed" and args.range is None:
        raise ConfigError("--normalize fixed needs --range LOW HIGH.")
    slide, encoder, store = encoder_and_store(args.slide, args.model, args.features, args.device)
    with slide:
        text = encoder.encode_text(args.prompt)
        label = " - ".join(args.prompt) if args.mode == "contrast" else args.prompt[0]
        heatmap = similarity_map(
            store,
            text,
            mode=args.mode,
            normalize=args.normalize,
            temperature=args.temperature,
            value_range=tuple(args.range) if args.range else None,
            smooth_sigma=args.smooth,
            prompt=label,
        )
        boxes = box_scores = None
        if args.top > 0:
            boxes, box_scores = top_patches(store, heatmap.scores, args.top)
        for out in args.out:
            export_heatmap(
                out,
                heatmap,
                store,
                slide=slide,
                boxes=boxes,
                box_scores=box_scores,
                geojson_style=args.geojson_style,
                contour_levels=args.levels,
                max_size=args.max_size,
                level=args.level,
                colormap=args.colormap,
            )
            print(out)
    return 0
