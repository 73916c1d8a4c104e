"""The drawing floor of this display: napari alone, with no plugin, at three window sizes.

A bare napari viewer (nothing of napari-medvl loaded but the 10 ms stall probe) shows a
4096 x 4096 RGB pyramid held in memory (no file, no reads, no decoding) and is panned at
level 0 exactly as ``bench_plugin_stalls.py`` pans its slides (40 steps of 120 screen px,
one every 40 ms, two rows of tissue), then redrawn 40 times with nothing but the image's
contrast limits changed. The same is done with the main window at 640 x 480, at the stall
bench's 1066 x 651 (the size napari first opens with on the 1600 x 1000 Xvfb screen) and at
1500 x 950. Then, at the stall bench's size, layers like the plugin's overlays are added, an
image with a colour map and a shapes layer with text, twice each. Prints the OpenGL renderer,
the canvas pixels, the worst and p99 event-loop gaps of each phase, and each size's pan p99
relative to the smallest window.

What it shows: where the gaps grow with the canvas's pixels while nothing of ours runs, they
are the cost of drawing on this display (software OpenGL under Xvfb, the window composited by
Qt), and no plugin code can bring a frame below them; a layer's first draw also compiles its
shader programs, which a software renderer does slowly. Needs a display (run it under
tools/with_display.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from bench_io_slide_read import tissue_like  # noqa: E402
from bench_plugin_stalls import BENCH_WINDOW, _pan, _settle, bench_viewer  # noqa: E402

WINDOW_SIZES = ((640, 480), BENCH_WINDOW, (1500, 950))
"""Main-window sizes (width, height): small, the stall bench's, large."""
PAN_ROWS_UM = (250.0, 1050.0)
WARM_UP_ROW_UM = 1450.0
"""A first pan, not counted: the first pan of a session has a one-time gap of its own."""
REDRAWS = 40
REDRAW_MS = 40


def gl_renderer() -> str:
    """The OpenGL renderer of the current vispy canvas (napari's, once a viewer is shown)."""
    from vispy.gloo import get_current_canvas, gl

    canvas = get_current_canvas()
    if canvas is None:
        return "unknown"
    canvas.set_current()
    return f"{gl.glGetParameter(gl.GL_RENDERER)}, OpenGL {gl.glGetParameter(gl.GL_VERSION)}"


def _redraws(app, probe, layer) -> tuple[float, float]:
    """Worst and p99 gap over ``REDRAWS`` redraws that change only the contrast limits."""
    probe.start()
    for index in range(REDRAWS):
        layer.contrast_limits = (0.0, 255.0 - index % 2)
        _settle(app, REDRAW_MS / 1e3)
    _settle(app, 0.5)
    probe.stop()
    return probe.worst_ms, probe.percentile_ms(99)


def _layer_adds(viewer, app, probe) -> list[tuple[str, float, float]]:
    """Worst gap and p99 from adding an overlay-like layer until it is drawn: a float image
    with a colour map at half opacity (as a heatmap), then a shapes layer of rectangles with
    text (as top patches); each kind twice (the first pays napari's one-time set-up and the
    compilation of the layer's shader programs, the second only the latter)."""
    rectangles = [np.array([[0.0, 0.0], [100.0, 100.0]]), np.array([[200.0, 0.0], [300.0, 100.0]])]
    adds = (
        (
            "image",
            lambda: viewer.add_image(
                np.linspace(0.0, 1.0, 30 * 40, dtype=np.float32).reshape(30, 40),
                scale=(50.0, 50.0),
                colormap="turbo",
                opacity=0.5,
            ),
        ),
        (
            "shapes",
            lambda: viewer.add_shapes(
                rectangles,
                shape_type="rectangle",
                edge_color="yellow",
                face_color="transparent",
                text={"string": ["1", "2"]},
            ),
        ),
    )
    results = []
    for name, add in adds:
        for attempt in ("first", "second"):
            probe.start()
            add()
            _settle(app, 1.0)
            probe.stop()
            results.append((f"{name}, {attempt}", probe.worst_ms, probe.percentile_ms(99)))
    return results


def main() -> None:
    from qtpy.QtWidgets import QApplication

    from napari_medvl._stall_probe import StallProbe

    base = tissue_like(4096, seed=1)
    levels = [base, np.ascontiguousarray(base[::4, ::4]), np.ascontiguousarray(base[::16, ::16])]
    import pandas  # noqa: F401  (a shapes layer's features need it: imported, not measured)

    rows = []
    with bench_viewer() as viewer:
        app = QApplication.instance()
        layer = viewer.add_image(levels, multiscale=True, rgb=True, scale=(0.5, 0.5))
        probe = StallProbe()
        print(f"renderer: {gl_renderer()}")
        _pan(viewer, app, probe, (WARM_UP_ROW_UM, 200.0), (0.0, 1.0))  # not counted
        for size in WINDOW_SIZES:
            viewer.window.resize(*size)
            _settle(app, 1.0)
            height, width = (int(v) for v in viewer.canvas.size)
            pans = []
            for row in PAN_ROWS_UM:
                _pan(viewer, app, probe, (row, 200.0), (0.0, 1.0))
                pans.append((probe.worst_ms, probe.percentile_ms(99)))
            rows.append((size, width, height, pans, _redraws(app, probe, layer)))
        viewer.window.resize(*BENCH_WINDOW)
        _settle(app, 1.0)
        layer_adds = _layer_adds(viewer, app, probe)
    small = rows[0]
    small_p99 = max(p99 for _, p99 in small[3])
    print()
    print("window       canvas px    pan worst / p99 ms (two rows)    redraws worst / p99 ms")
    for (window_w, window_h), width, height, pans, (redraw_worst, redraw_p99) in rows:
        pan_text = ", ".join(f"{worst:5.0f} / {p99:4.0f}" for worst, p99 in pans)
        print(
            f"{window_w:4d} x {window_h:<4d}  {width:5d} x {height:<5d}  {pan_text:30s}   "
            f"{redraw_worst:5.0f} / {redraw_p99:4.0f}"
        )
    print()
    for (window_w, window_h), width, height, pans, _ in rows[1:]:
        pixels = width * height / (small[1] * small[2])
        ratio = max(p99 for _, p99 in pans) / small_p99
        print(
            f"ratio pan p99 {window_w} x {window_h} / {small[0][0]} x {small[0][1]}: "
            f"{ratio:4.1f}x for {pixels:4.1f}x the canvas px"
        )
    print()
    for name, worst, p99 in layer_adds:
        print(
            f"add a layer at {BENCH_WINDOW[0]} x {BENCH_WINDOW[1]} ({name:14s}): "
            f"worst {worst:5.0f} ms, p99 {p99:4.0f} ms"
        )
    bench_size = next(row for row in rows if row[0] == BENCH_WINDOW)
    meets = all(worst <= 100 and p99 <= 50 for worst, p99 in bench_size[3])
    print(
        f"bare napari pans within 100 / 50 ms at {BENCH_WINDOW[0]} x {BENCH_WINDOW[1]}: "
        f"{'yes' if meets else 'no'} (no plugin code runs: the floor under any plugin's frame)"
    )


if __name__ == "__main__":
    main()
