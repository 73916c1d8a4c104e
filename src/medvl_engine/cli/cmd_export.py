"""`medvl export HEATMAP.npz --out FILE...`: re-export a saved heatmap, no model needed."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "convert a heatmap saved as .npz to GeoJSON, PNG/JPEG (with --slide), TIFF or CSV"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heatmap", type=Path, help=".npz written by `medvl heatmap`")
    parser.add_argument(
        "--out",
        action="append",
        required=True,
        type=Path,
        help="output file (.geojson .png .jpg .tiff .npz .csv); repeat for several",
    )
    parser.add_argument("--slide", type=Path, default=None, help="the slide (for PNG/JPEG)")
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


def run(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from medvl_engine.export import export_heatmap, load_heatmap_npz
    from medvl_engine.heatmap import top_patches

    heatmap, layout = load_heatmap_npz(args.heatmap)
    boxes = box_scores = None
    if args.top > 0:
        boxes, box_scores = top_patches(layout, heatmap.scores, args.top)
    slide = None
    if args.slide is not None:
        from medvl_engine.io.slide import open_slide

        slide = open_slide(args.slide)
    with slide if slide is not None else nullcontext():
        for out in args.out:
            export_heatmap(
                out,
                heatmap,
                layout,
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
