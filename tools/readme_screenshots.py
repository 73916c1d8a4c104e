"""Make the README screenshots: each MedVL dock in use in a napari window, saved as small PNGs.

Run with a display (Xvfb is started when there is none)::

    tools/with_display.sh .venv/bin/python tools/readme_screenshots.py --out docs/screenshots

It opens the synthetic sample data (a seeded H&E slide; a seeded four-view mammogram exam),
docks one widget per window, sets a realistic input, runs the dock's job in its background
worker, waits for the result by processing Qt events, and saves the whole window, downscaled
and palette-quantised so each PNG stays small:

- ``heatmap.png``: contrast heatmap "tumor minus stroma" on a diverging map, with its colour bar.
- ``topk.png``: the four views hung (R | L, CC over MLO) and TopK boxes on the left pair.
- ``classify.png``: zero-shot slide classification with the demo preset and its attention map.

Offline (HF_HUB_OFFLINE=1); every PNG is written atomically. A dock that does not finish
within ``--timeout`` seconds, or that reports an error, stops the script with one sentence
(exit status 2).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHOTS = ("heatmap", "topk", "classify")
WINDOW_SIZE = (1600, 1000)  # (width, height) of the napari window, px
DEFAULT_WIDTH = 1000  # width of the saved PNGs, px
PALETTE_COLOURS = 128


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Process Qt events in short turns until ``done()``; MedVLError after ``timeout_s``."""
    from qtpy.QtTest import QTest

    from medvl_engine.errors import MedVLError

    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise MedVLError(f"{what} did not finish within {timeout_s:.0f} s; try --timeout.")
        QTest.qWait(25)


def settle(turns: int = 20) -> None:
    """Let napari lay out and paint (a few short event-loop turns)."""
    from qtpy.QtTest import QTest

    for _ in range(turns):
        QTest.qWait(10)


def run_job(widget: Any, timeout_s: float, what: str) -> None:
    """Start ``widget.run()`` and wait for its runner; MedVLError if it failed or did not start."""
    from medvl_engine.errors import MedVLError

    if widget.run() is None:
        raise MedVLError(f"{what} did not start: {widget.controls.status.value}")
    try:
        wait_until(lambda: not widget.runner.running, timeout_s, what)
    except MedVLError:
        worker = widget.runner.worker
        widget.runner.cancel()
        if worker is not None:
            # The cancelled worker still reports to the dock's Qt objects: keep them alive
            # until its thread has ended, or the exit aborts the process.
            wait_until(lambda: not worker.is_running, 60.0, f"Cancelling {what}")
        raise
    if widget.runner.last_error is not None:
        raise MedVLError(f"{what} failed: {widget.runner.last_error}")


def new_viewer(title: str) -> Any:
    import napari

    viewer = napari.Viewer(title=title, show=True)
    viewer.window._qt_window.resize(*WINDOW_SIZE)
    return viewer


def heatmap_window(timeout_s: float) -> Any:
    """Slide + heatmap dock: contrast "tumor; stroma" (A minus B), diverging map, colour bar."""
    from napari.layers import Layer

    from napari_medvl._heatmap_widget import HeatmapWidget
    from napari_medvl._sample_data import synthetic_slide

    viewer = new_viewer("MedVL: text prompt heatmap")
    for data in synthetic_slide():
        viewer.add_layer(Layer.create(*data))
    widget = HeatmapWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Text prompt heatmap")
    widget.prompts.value = "tumor; stroma"
    widget.mode.value = "contrast"
    widget.top_n.value = 5
    settle()
    viewer.reset_view()
    run_job(widget, timeout_s, "The heatmap dock")
    return viewer


def topk_window(timeout_s: float) -> Any:
    """Four-view exam hung R | L, CC over MLO, with the TopK boxes on the left pair (at the K
    the model was evaluated with)."""
    from napari.layers import Layer

    from medvl_engine.errors import MedVLError
    from napari_medvl._sample_data import synthetic_exam
    from napari_medvl._topk_widget import TopKWidget

    viewer = new_viewer("MedVL: mammogram TopK")
    for data in synthetic_exam():
        viewer.add_layer(Layer.create(*data))
    widget = TopKWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Mammogram TopK")
    widget.hang()
    wait_until(lambda: not widget._hang_runner.running, timeout_s, "Hanging the views")
    if widget._hang_runner.last_error is not None:
        raise MedVLError(f"Hanging the views failed: {widget._hang_runner.last_error}")
    run_job(widget, timeout_s, "The TopK dock")
    wait_until(lambda: not widget.drawing, timeout_s, "Drawing the TopK boxes")
    return viewer


def classify_window(timeout_s: float) -> Any:
    """Slide + classification dock: the demo preset's classes ranked, attention of the winner."""
    from napari.layers import Layer

    from napari_medvl._classify_widget import DEFAULT_PRESET, ClassifyWidget
    from napari_medvl._sample_data import synthetic_slide

    viewer = new_viewer("MedVL: slide classification")
    for data in synthetic_slide():
        viewer.add_layer(Layer.create(*data))
    widget = ClassifyWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Slide classification")
    widget.preset.value = DEFAULT_PRESET
    settle()
    viewer.reset_view()
    run_job(widget, timeout_s, "The classification dock")
    return viewer


WINDOWS: dict[str, Callable[[float], Any]] = {
    "heatmap": heatmap_window,
    "topk": topk_window,
    "classify": classify_window,
}


def small_png(pixels: Any, width: int) -> Any:
    """An RGB(A) window grab [H, W, 3|4] as a Pillow palette image ``width`` px wide."""
    from PIL import Image

    image = Image.fromarray(pixels[..., :3])
    if image.width > width:
        height = round(image.height * width / image.width)
        image = image.resize((width, height), Image.Resampling.LANCZOS)
    return image.quantize(
        PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )


def _drawn(viewer: Any) -> bool:
    """True when every visible layer is sliced (napari's ``loaded``: with asynchronous
    slicing a layer draws a few turns later) and no slide has blocks of the view left to
    decode (its progressive levels show the coarser level until they are)."""
    from napari_medvl._progressive_levels import ProgressiveLevel

    for layer in viewer.layers:
        if not layer.visible:
            continue
        level = layer.data[0] if layer.multiscale else None
        if not layer.loaded or (isinstance(level, ProgressiveLevel) and not level.store.idle()):
            return False
    return True


def save_window(viewer: Any, path: Path, width: int) -> Path:
    """Screenshot the whole window (canvas, layer list, docks) into ``path``; close the viewer."""
    from medvl_engine import atomic_write

    settle()
    viewer.reset_view()
    wait_until(lambda: _drawn(viewer), 60.0, "Drawing the layers")
    settle()  # a slide's refresh follows its last decoded block by a few turns
    image = small_png(viewer.screenshot(canvas_only=False, flash=False), width)
    written = atomic_write(
        path, lambda temporary: image.save(temporary, "PNG", optimize=True), what="screenshot"
    )
    viewer.close()
    return written


def make_screenshots(
    out: Path, shots: tuple[str, ...] = SHOTS, width: int = DEFAULT_WIDTH, timeout_s: float = 600
) -> list[Path]:
    """Make the named screenshots in ``out`` (created if missing); returns the written paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in shots:
        started = time.perf_counter()
        viewer = WINDOWS[name](timeout_s)
        written.append(save_window(viewer, out / f"{name}.png", width))
        size_kb = written[-1].stat().st_size / 1024
        seconds = time.perf_counter() - started
        print(f"{written[-1]}  {size_kb:.0f} KB  ({seconds:.1f} s)", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--only", choices=SHOTS, nargs="+", help="make only these screenshots")
    parser.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="PNG width, px")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per dock job")
    args = parser.parse_args(argv)

    from medvl_engine.errors import MedVLError

    try:
        make_screenshots(args.out, tuple(args.only or SHOTS), args.width, args.timeout)
    except MedVLError as error:
        print(f"readme_screenshots: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
