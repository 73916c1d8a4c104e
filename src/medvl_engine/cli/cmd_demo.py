"""`medvl demo --out DIR`: the demo scene computed headless and written as files.

Makes a synthetic slide and mammogram pair in DIR, runs the demo models on them and writes
PNG composites, QuPath GeoJSON, CSV and TIFF files (see :mod:`medvl_engine.demo`). The
plugin's demo (``make demo``) shows the same scene in a viewer.
"""

from __future__ import annotations

import argparse

from medvl_engine.demo import add_arguments

HELP = "make synthetic data, run the demo models on it and write the results as files"

__all__ = ["HELP", "add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    from medvl_engine.common.atomic import atomic_group
    from medvl_engine.demo import build_scene, report, say, write_scene

    scene = build_scene(
        args.out, args.prompt, args.model, args.topk_model, args.k, args.slide_size, progress=say
    )
    with atomic_group():  # the result files appear together, once all are written
        written = write_scene(scene)
    report(scene, written)
    return 0
