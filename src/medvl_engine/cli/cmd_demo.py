"""`medvl demo --out DIR`: the demo scene computed headless and written as files.

Makes a synthetic slide and mammogram pair in DIR, runs the demo models on them and writes
PNG composites, QuPath GeoJSON, CSV and TIFF files (see :mod:`medvl_engine.demo`). The
plugin's demo (``make demo``) shows the same scene in a viewer.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HELP = "make synthetic data, run the demo models on it and write the results as files"

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="output folder")
    parser.add_argument("--prompt", default="tumor", help="text prompt for the slide heatmap")
    parser.add_argument("--model", default="medvl-demo", help="pathology encoder name or folder")
    parser.add_argument(
        "--topk-model", default="topksiglip-demo", help="TopKSigLIP model name or folder"
    )
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="TopK patches per breast (default: the K the TopK model was trained with)",
    )
    parser.add_argument(
        "--slide-size",
        type=_size,
        default=None,
        metavar="WxH",
        help="synthetic slide size in level-0 px (default 3072x2048)",
    )


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 3072x2048") from None
    if width < 256 or height < 256:
        raise argparse.ArgumentTypeError(f"slide size {text} is too small; use at least 256x256")
    return width, height


def say(message: str) -> None:
    """Print one progress line of the demo."""
    print(f"medvl demo: {message}", flush=True)


def run(args: argparse.Namespace) -> int:
    from medvl_engine._atomic import atomic_group
    from medvl_engine.demo import build_scene, write_scene

    scene = build_scene(
        args.out, args.prompt, args.model, args.topk_model, args.k, args.slide_size, progress=say
    )
    with atomic_group():  # the result files appear together, once all are written
        written = write_scene(scene)
    report(scene, written)
    return 0


def report(scene: Any, written: list[Path]) -> None:
    """Print the demo's notes, what each model is, the stage timings and the files written."""
    from medvl_engine.demo import format_timings
    from medvl_engine.demo_models import demo_notice_for

    for note in scene.notes:
        say(note)
    results = ((scene.model, scene.heatmap), (scene.topk_model, scene.topk))
    for model, result in results:
        notice = demo_notice_for(model)
        if result is not None and notice:
            say(f"{model}: {notice}")
    say(f"timings: {format_timings(scene.timings)}")
    say(f"wrote {len(written)} file(s):")
    for path in written:
        print(path)
