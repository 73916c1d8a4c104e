"""`napari-medvl-demo`: the demo scene shown in napari, or written as files without a display.

Runs :func:`medvl_engine.demo.build_scene` (synthetic slide + mammogram pair, demo models),
then opens one viewer for the slide and one for the mammograms with the widgets docked (the
heatmap dock is given the model's name and the feature store the demo wrote, so its new
prompts run in the model process; see :mod:`._demo_viewer`). The scene itself is computed
here, before any viewer opens. On a machine without a display (or with ``MEDVL_HEADLESS``
set, or ``--headless``) it writes the same files as ``medvl demo``; under a virtual display
(xvfb-run) it also saves screenshots of the viewers instead of waiting on a window nobody
can see.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from medvl_engine import demo
from medvl_engine.errors import MedVLError

__all__ = ["display_available", "main", "virtual_display"]


def virtual_display() -> bool:
    """True under xvfb-run, a display nobody looks at (its Xauthority is in /tmp/xvfb-run.*)."""
    return "xvfb-run." in os.environ.get("XAUTHORITY", "")


def display_available() -> bool:
    """True when a window can open: DISPLAY or WAYLAND_DISPLAY set and MEDVL_HEADLESS unset."""
    if os.environ.get("MEDVL_HEADLESS"):
        return False
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="napari-medvl-demo", description=__doc__.splitlines()[0])
    demo.add_arguments(parser)
    parser.add_argument(
        "--headless", action="store_true", help="write files even when a display is available"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="let the libraries' load reports and warnings through",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 with one sentence on a MedVLError)."""
    from medvl_engine.common.console import command_session

    args = _parser().parse_args(argv)
    try:
        with command_session(verbose=args.verbose):
            return _run(args)
    except MedVLError as error:
        print(f"napari-medvl-demo: error: {error}", file=sys.stderr)
        return error.exit_code


def _run(args: argparse.Namespace) -> int:
    scene = demo.build_scene(
        args.out,
        args.prompt,
        args.model,
        args.topk_model,
        args.k,
        args.slide_size,
        progress=demo.say,
    )
    show = display_available() and not args.headless
    if show and not virtual_display():
        from napari_medvl._demo_viewer import show_scene

        show_scene(scene)
        return 0
    written = demo.write_scene(scene)
    if show:
        from napari_medvl._demo_viewer import save_screenshots, show_scene

        with scene.stage("viewer screenshots"):
            written.extend(save_screenshots(show_scene(scene, run=False), scene.out))
    demo.report(scene, written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
