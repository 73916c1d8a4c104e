"""A changed class list in the "Segment by prompts" dock vs bare napari drawing the same layers.

A synthetic 4096 x 3072 slide at 0.5 um/px is opened in a shown viewer (the stall bench's
window size) with the dock docked; its first run extracts the features (not timed; they stay
in the dock's cache, and its MEDVL_CACHE is a fresh folder). Then, round after round, the
class list changes and the time runs from the change to the dock's layers updated and drawn
(the tissue-map labels, the regions' polygons, the area table and the legend):

  paused      the new list is typed, the user pauses (the dock encodes the new classes' text
              in that pause, ``PREFETCH_MS`` after the last keystroke), then presses Run
  at once     a list with a class never seen before, Run at once: its text is encoded in
              the run (22 CONCH templates, one batch); the dock first shows the map of every
              class, the new one from its first wording (one text: ``first look``, timed
              too), then the complete map with its prompt ensemble (timed)
  known       a list of classes seen before (one dropped, the order changed)

and, interleaved with them in the same viewer, the floor: bare napari putting the same labels
array (its dtype too) and the same rings (the same shape type, colours and class text) into
a Labels and a Shapes layer of its own, added once (``floor add``) and then replaced
(``floor replace``), drawn by the same event-loop turns. Prints the median and worst
milliseconds of each, each dock scenario's median over the floor's median (ratio) and minus
it (ms above the floor), and the medians of its two parts: the job (Run to its result on the
GUI thread) and the presenter's update of the layers, table and legend (on the GUI thread).
The dock's jobs run in the model process as in napari (MEDVL_MODEL_PROCESS=0: in threads); the
bench says which, whether napari's process imported torch, and the load average.
Needs a display: run it under tools/with_display.sh, with OMP_NUM_THREADS=1 on a busy box.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plugin_stalls import _settle, bench_viewer  # noqa: E402

SLIDE_SIZE = (4096, 3072)
FIRST = "tumor\nstroma\nadipose"
KNOWN = ("stroma\ntumor", "adipose\ntumor\nstroma", "tumor\nadipose")
NEW_CLASSES = ("necrosis", "lymphocytes", "mucin", "blood vessels", "nerve", "fat")
NEW_PAUSED = ("inflammation", "muscle", "epithelium", "normal gland", "cartilage", "bone")


def _drawn(app) -> float:
    """Two event-loop turns (the update's events, then the paint) and the time after them."""
    app.processEvents()
    app.processEvents()
    return time.perf_counter()


def _encoded(widget, lines: str) -> bool:
    """True when the text embedding of every class of ``lines`` is encoded (in the model
    process, or in the dock's cache where the dock runs its jobs in threads)."""
    from medvl_engine.prompts import parse_class
    from napari_medvl._segment_job import embeddings_ready

    classes = dict(parse_class(line) for line in lines.splitlines())
    return embeddings_ready(
        widget.controller.cache, widget.model.value, widget.templates.value, classes
    )


def _dock_change(app, widget, lines: str, pause: bool, parts: dict | None = None) -> float:
    """Milliseconds from the class list's change (or, after a pause, from Run) to the dock's
    layers updated and drawn; ``parts`` gathers the milliseconds of the job (Run to its
    result on the GUI thread), of the presenter's update (on the GUI thread) and, for a run
    that shows a first look (every class, the new ones from their first wording), from the
    change to that first look drawn."""
    shown: list[float] = []
    looked: list[float] = []
    original = widget.presenter.show_outcome
    runner = widget.controller.runner
    first_look = runner.on_partial

    def show(outcome) -> None:
        shown.append(time.perf_counter())
        original(outcome)
        shown.append(time.perf_counter())

    def look(partial) -> None:
        first_look(partial)
        looked.append(time.perf_counter())  # drawn by the wait loop's next turns

    runner._on_result, runner.on_partial = show, look
    try:
        started = time.perf_counter()
        widget.classes.value = lines
        if pause:
            from napari_medvl._segment_widget import PREFETCH_MS

            _settle(app, PREFETCH_MS / 1e3)
            waited = time.perf_counter()
            while not _encoded(widget, lines) and time.perf_counter() - waited < 30:
                _settle(app, 0.01)
            started = time.perf_counter()
        widget.run()
        while not shown:
            app.processEvents()
            if len(looked) == 1:
                looked.append(_drawn(app))
            time.sleep(0.001)
        finished = _drawn(app)
    finally:
        runner._on_result, runner.on_partial = original, first_look
    if widget.runner.last_error is not None:
        raise RuntimeError(f"the dock failed: {widget.runner.last_error}")
    if parts is not None:
        parts.setdefault("job", []).append((shown[0] - started) * 1e3)
        parts.setdefault("update", []).append((shown[1] - shown[0]) * 1e3)
        if looked:
            parts.setdefault("first look", []).append((looked[-1] - started) * 1e3)
    return (finished - started) * 1e3


def _floor(app, viewer, widget, floor_layers: dict) -> tuple[str, float]:
    """Bare napari: the dock's current labels and polygons into layers of its own."""
    import numpy as np

    labels_layer = widget.presenter._viewer.layers[widget.layer_name()]
    shapes_layer = widget.presenter._viewer.layers[widget.presenter.regions_name()]
    labels = np.array(labels_layer.data, copy=True)
    polygons = [np.array(p, copy=True) for p in shapes_layer.data]
    kinds = list(shapes_layer.shape_type)
    colours = np.array(shapes_layer.edge_color, copy=True)
    features = shapes_layer.features.copy()
    started = time.perf_counter()
    if not floor_layers:
        kind = "floor add"
        floor_layers["labels"] = viewer.add_labels(
            labels,
            name="floor labels",
            opacity=0.5,
            scale=labels_layer.scale,
            translate=labels_layer.translate,
            colormap=labels_layer.colormap,
            units=labels_layer.units,
        )
        floor_layers["shapes"] = viewer.add_shapes(
            polygons,
            shape_type=kinds,
            name="floor shapes",
            edge_color=colours,
            face_color="transparent",
            edge_width=shapes_layer.edge_width[0] if len(polygons) else 3.0,
            features=features,
            text={"string": "{text}", "color": "white", "anchor": "center", "size": 10},
            units=shapes_layer.units,
        )
    else:
        kind = "floor replace"
        floor_labels = floor_layers["labels"]
        floor_labels.data = labels
        if len(floor_labels.colormap.color_dict) != len(labels_layer.colormap.color_dict):
            floor_labels.colormap = labels_layer.colormap  # as the dock does for a new count
        shapes = floor_layers["shapes"]
        shapes.data = list(zip(polygons, kinds, strict=True))
        shapes.features = features
        if len(polygons):
            shapes.edge_color = colours
    finished = _drawn(app)
    return kind, (finished - started) * 1e3


def _load() -> str:
    """The 1, 5 and 15 minute load averages (/proc/loadavg)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _line(name: str, values: list[float], floor_ms: float | None) -> str:
    median = statistics.median(values)
    text = f"{name:<14} median {median:7.1f} ms  worst {max(values):7.1f} ms  (n={len(values)})"
    if floor_ms is not None:
        text += f"  ratio {median / floor_ms:5.1f}x  above floor {median - floor_ms:+7.1f} ms"
    return text


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["MEDVL_CACHE"] = str(Path(scratch) / "cache")
        import npe2
        from qtpy.QtWidgets import QApplication

        from medvl_engine.synthetic import make_synthetic_slide
        from napari_medvl._segment_job import SegmentCache
        from napari_medvl._segment_widget import SegmentWidget

        made = make_synthetic_slide(Path(scratch) / "bench.tiff", seed=2, size=SLIDE_SIZE)
        with bench_viewer() as viewer:
            app = QApplication.instance()
            npe2.PluginManager.instance().discover()
            viewer.open(str(made.path), plugin="napari-medvl")
            widget = SegmentWidget(viewer, cache=SegmentCache())
            viewer.window.add_dock_widget(widget, name="segment")
            widget.templates.value = "conch"
            started = time.perf_counter()
            first = _dock_change(app, widget, FIRST, pause=False)
            print(f"first run (features extracted): {first / 1e3:.1f} s")
            _settle(app, 1.0)

            times: dict[str, list[float]] = {
                "paused": [],
                "at once": [],
                "known": [],
                "floor add": [],
                "floor replace": [],
            }
            floor_layers: dict = {}
            parts: dict[str, dict[str, list[float]]] = {}
            for index in range(len(NEW_CLASSES)):
                known = KNOWN[index % len(KNOWN)]
                rounds = (
                    ("at once", f"{FIRST}\n{NEW_CLASSES[index]}", False),
                    ("known", known, False),
                    ("paused", f"{FIRST}\n{NEW_PAUSED[index]}", True),
                )
                for name, lines, pause in rounds:
                    took = _dock_change(app, widget, lines, pause, parts.setdefault(name, {}))
                    times[name].append(took)
                    kind, floor_ms = _floor(app, viewer, widget, floor_layers)
                    times[kind].append(floor_ms)
                    _settle(app, 0.2)
            floor = statistics.median(times["floor replace"])
            regions = len(viewer.layers[widget.presenter.regions_name()].data)
            labels = viewer.layers[widget.layer_name()].data.shape
            print(
                f"slide {SLIDE_SIZE[0]} x {SLIDE_SIZE[1]} px, map {labels[0]} x {labels[1]} "
                f"cells, {regions} polygons; rounds took {time.perf_counter() - started:.0f} s"
            )
            from napari_medvl import _worker_process

            child = _worker_process._shared.pid if _worker_process._shared is not None else None
            print(
                f"model process: {f'pid {child}' if child else 'none (threads)'}; torch in "
                f"napari's process: {'torch' in sys.modules}; load {_load()}"
            )
            for name in ("floor add", "floor replace"):
                print(_line(name, times[name], None))
            for name in ("paused", "known", "at once"):
                print(_line(name, times[name], floor))
                job, update = (statistics.median(parts[name][k]) for k in ("job", "update"))
                print(f"{'':<14} job {job:6.1f} ms, then layers + table + legend {update:6.1f} ms")
                if parts[name].get("first look"):
                    print(_line("  first look", parts[name]["first look"], floor))


if __name__ == "__main__":
    main()
