"""`medvl export HEATMAP.npz --out FILE...`: re-export a saved heatmap, no model needed.

All ``--out`` files are renamed into place together once every one is written (see
:func:`medvl_engine.common.atomic.atomic_group`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from medvl_engine.cli._pathology import (
    add_output_arguments,
    add_rendering_arguments,
    write_outputs,
)

HELP = "convert a heatmap saved as .npz to GeoJSON, PNG/JPEG (with --slide), TIFF or CSV"

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heatmap", type=Path, help=".npz written by `medvl heatmap`")
    add_output_arguments(parser)
    parser.add_argument("--slide", type=Path, default=None, help="the slide (for PNG/JPEG)")
    add_rendering_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from medvl_engine.export import load_heatmap_npz
    from medvl_engine.export.input_guard import check_outputs_spare_inputs

    check_outputs_spare_inputs(args.out, [args.heatmap, args.slide])
    heatmap, layout = load_heatmap_npz(args.heatmap)
    slide = None
    if args.slide is not None:
        from medvl_engine.io.slide import open_slide

        slide = open_slide(args.slide)
    with slide if slide is not None else nullcontext():
        write_outputs(args, heatmap, layout, slide)
    return 0
