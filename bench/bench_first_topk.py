"""The first TopK result against bare napari's floor, measured interleaved in one run.

The exam: a synthetic four-view screening exam (R CC, R MLO, L CC, L MLO of one patient,
1024 x 640 px DICOM views, as the plugin's "synthetic-exam" sample writes it), written by a
separate Python process so that nothing of it is imported here.
Plugin: a fresh viewer of the stall bench's window size opens the four files with the plugin's
reader, hangs them as a reading room does (R | L, CC over MLO; napari_medvl._mammo_hanging),
docks the TopK dock on the L CC + L MLO pair (it adds the result layers of the pair, then
those of the R pair, empty: "dock opening"), clicks Run one second after the dock opened, with
the model NOT loaded (the model process is stopped before each round; with ``--threads`` each
round's dock starts without a model, torch stays imported after round 1), and pans until the
result is drawn ("first TopK"); then Run on the R pair with the model loaded ("second
breast": its layers were added when the dock opened, the result fills them).
Floor (bare napari, nothing of napari-medvl but the 10 ms stall probe): a viewer of the same
size, a blank dock narrowing its canvas to the plugin's, shows the same four views as in-memory
images where the plugin hung them, and is panned along the same path; then the layers the dock
added when it opened are added to it, as napari calls. The path: the CC row (y at the middle of
the CC views, source px), zoomed so that ``PAN_STEPS`` steps of ``PAN_STEP_PX`` screen px cross
the exam's width, back and forth.
Rounds alternate plugin and floor; the floor pans as many passes as the plugin phase took in
its round (the first 4 passes alone: the floor as bench_first_heatmap first measured it).
Prints which path the dock used (the model process or threads, from which process imported
torch), worst and p99 gaps of each phase, and the target ratios both ways, with the samples
behind each: first TopK worst <= 2x floor worst, p99 <= 1.5x floor p99, the median of the
per-pass worst gaps; second breast worst <= 2x floor worst; dock opening worst <= 2x the floor's
adding of the same layers; and the first TopK against the floor panned with the dock's layers
in the viewer too (the plugin's viewer holds them while it pans) and against the floor showing
the first TopK's result (the view the plugin draws once it is filled in); bare napari's pan
showing both breasts' results (after the second breast's run), their importance maps alone, and
their boxes and labels alone (what each kind of result layer costs a frame), and both with
the shapes layers' empty highlights hidden, as the plugin's are
(``_napari_compat.hide_empty_highlights``); then what each
round's long gaps held (a result layer fill, a progress report, a garbage collection, and the
cores the model process kept busy around them: ``_gap_marks.py``). Needs a display (run it
under tools/with_display.sh):

    tools/with_display.sh .venv/bin/python bench/bench_first_topk.py --rounds 2 [--threads]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import _gap_stacks as gap_stacks  # noqa: E402
from _gap_marks import attribute, fill_costs, mark_topk_work, stop_marking  # noqa: E402
from bench_first_heatmap import (  # noqa: E402
    FLOOR_PASSES,
    PAN_STEP_PX,
    PAN_STEPS,
    RUN_AFTER_DOCK_S,
    Pans,
    _line,
    _pan_pass,
    _plain,
    comparison_table,
    other_ratios,
)
from bench_plugin_stalls import (
    _settle,
    bench_viewer,
    canvas_size,
    closed_viewers_held,
    stand_in_dock,
)  # noqa: E402

ROUNDS = 2
FIRST_TOPK_CAP_S = 240.0
STATUS = "napari_medvl._worker_process:status_in_child"

_WRITE_EXAM = """
import sys
from medvl_engine.synthetic import make_mammogram_case
for seed, laterality, findings in ((8, "R", []), (7, "L", ["mass"])):
    case = make_mammogram_case(sys.argv[1], seed=seed, laterality=laterality,
                               findings=findings, exam_id="exam")
    print(case.cc_path)
    print(case.mlo_path)
"""


def write_exam(folder: Path) -> list[Path]:
    """The four views' DICOM files, written by another Python process."""
    done = subprocess.run(
        [sys.executable, "-c", _WRITE_EXAM, str(folder)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return [Path(line) for line in done.stdout.splitlines() if line.strip()]


def _pan_path(viewer, app) -> dict[str, float]:
    """Zoom so the steps cross the exam's width along the CC row; the path's start."""
    (y0, x0), (y1, x1) = viewer.layers.extent.world[:, -2:]
    images = [layer for layer in viewer.layers if layer._type_string == "image"]
    cc_row = min(images, key=lambda layer: layer.extent.world[0][-2])  # the top row: CC
    (cy0, _), (cy1, _) = cc_row.extent.world[:, -2:]
    camera = viewer.scene.camera
    camera.zoom = PAN_STEPS * PAN_STEP_PX / float(x1 - x0)
    path = {"row": float(cy0 + cy1) / 2, "start": float(x0)}
    camera.center = (path["row"], path["start"])
    _settle(app, 1.0)
    return path


def _pair(viewer, laterality: str) -> tuple:
    """The (CC, MLO) mammogram layers of one breast."""
    from medvl_engine.io.mammo import view_family

    by_view = {
        view_family(layer.metadata.get("view")): layer
        for layer in viewer.layers
        if "mammogram" in layer.metadata and layer.metadata.get("laterality") == laterality
    }
    return by_view["CC"], by_view["MLO"]


def _pan(viewer, app, probe, passes: int, path: dict[str, float], ends: list[int]) -> None:
    """``passes`` more passes along ``path``, back and forth; tick counts appended to ends."""
    for _ in range(passes):
        _pan_pass(viewer, app, probe, len(ends) % 2 == 0, **path)
        ends.append(len(probe.gaps_ms))


def _where_topk_ran() -> str:
    """Which process imported torch: the model process (napari's did not) or threads."""
    from napari_medvl import _worker_process

    here = "torch" in sys.modules
    child = getattr(_worker_process, "_shared", None)
    there = False
    if child is not None and child.alive:
        there = "torch" in child.call(STATUS, ["torch"])["imported"]
    if there and not here:
        return "the model process"
    if here and not there:
        return "threads (napari's process)"
    return f"unclear (torch in napari's process: {here}, in the model process: {there})"


def _wait_done(widget, app, cap_s: float) -> None:
    started = time.perf_counter()
    while (widget.runner.running or widget.drawing) and time.perf_counter() - started < cap_s:
        _settle(app, 0.01)


def plugin_round(app, probe, paths: list[Path], stacks=None) -> dict[str, object]:
    """The plugin: open and hang, dock, Run after a second (model not loaded), pan until the
    result is drawn, then the other breast; ``stacks`` (a GapStacks) samples the first TopK."""
    import npe2

    from napari_medvl._mammo_hanging import hang_views
    from napari_medvl._topk_widget import TopKWidget
    from napari_medvl._worker_process import shutdown_model_process

    shutdown_model_process()  # the model is not loaded when Run is clicked
    result: dict[str, object] = {}
    with bench_viewer(role="plugin rounds") as viewer:
        npe2.PluginManager.instance().discover()
        for path in paths:
            viewer.open(str(path), plugin="napari-medvl")
        hang_views(viewer)
        result["views"] = [_plain(layer) for layer in viewer.layers]
        path = _pan_path(viewer, app)
        result["path"] = path
        before = set(viewer.layers)
        probe.start()
        widget = TopKWidget(viewer)
        viewer.window.add_dock_widget(widget, name="Mammogram TopK")
        widget.cc_choice.value, widget.mlo_choice.value = _pair(viewer, "L")
        started = changed = time.perf_counter()
        count = len(viewer.layers)
        while time.perf_counter() - started < 30 and (
            count == len(before) or time.perf_counter() - changed < 0.5
        ):  # the pair's result layers, added empty over event-loop turns, until 0.5 s pass
            _settle(app, 0.05)  # without another
            if len(viewer.layers) != count:
                count, changed = len(viewer.layers), time.perf_counter()
        probe.stop()
        result["dock"], result["canvas"] = list(probe.gaps_ms), canvas_size(viewer)
        result["dock_layers"] = [_plain(layer) for layer in viewer.layers if layer not in before]
        _settle(app, max(0.0, RUN_AFTER_DOCK_S - 0.5))
        marks = mark_topk_work(widget)
        probe.start()
        if stacks is not None:
            stacks.start()
        started = time.perf_counter()
        if widget.run() is None:
            raise RuntimeError(f"TopK refused to run: {widget.controls.status.value}")
        ends: list[int] = []
        while not ends or (
            (widget.runner.running or widget.drawing)
            and time.perf_counter() - started < FIRST_TOPK_CAP_S
        ):
            _pan(viewer, app, probe, 1, path, ends)
        probe.stop()
        if stacks is not None:
            stacks.stop()
            result["stacks"] = stacks.report(focus=stacks.focus)
        result["first"], result["ends"] = list(probe.gaps_ms), ends
        result["result_view"] = [  # the dock's layers as the result left them
            (_plain(layer), layer.visible) for layer in viewer.layers if layer not in before
        ]
        result["first_ends"], result["marks"] = list(probe.ends_s), marks
        stop_marking()
        result["first_s"], result["passes"] = time.perf_counter() - started, len(ends)
        if widget.runner.last_error is not None:
            raise widget.runner.last_error
        result["where"] = _where_topk_ran()
        widget.cc_choice.value, widget.mlo_choice.value = _pair(viewer, "R")
        _settle(app, 1.0)
        probe.start()
        widget.run()
        _wait_done(widget, app, FIRST_TOPK_CAP_S)
        _settle(app, 0.3)
        probe.stop()
        result["second"] = list(probe.gaps_ms)
        result["both_view"] = [
            (_plain(layer), layer.visible) for layer in viewer.layers if layer not in before
        ]
        if widget.runner.last_error is not None:
            raise widget.runner.last_error
    return result


def floor_round(
    app,
    probe,
    views: list,
    dock_layers: list,
    passes: int,
    canvas: tuple[int, int],
    result_view: list,
    both_view: list,
) -> dict[str, object]:
    """Bare napari, a blank dock narrowing its canvas to the plugin's ``canvas`` size: the
    same views in memory panned along the same path for max(FLOOR_PASSES, ``passes``) passes,
    then the dock's layers added, then ``passes`` passes more with them in the viewer (the
    plugin pans its first TopK with them there), and as many again with the hidden ones
    skipping napari's per-draw update, as the plugin's layers do
    (``_napari_compat.skip_draw_updates_while_hidden``); then as many again with the dock's
    layers as the plugin's first TopK left them (``result_view``: its result shown, the other
    breast's layers hidden), the view the plugin draws once the result is filled in; then with
    both breasts' results shown (``both_view``, after the second breast's run), and the same
    with only their importance maps shown, then only their boxes and labels."""
    from napari.layers import Layer

    gaps: dict[str, object] = {}
    with bench_viewer(role="floor rounds") as viewer:
        gaps["canvas"] = stand_in_dock(viewer, app, canvas)
        for data in views:
            viewer.add_layer(Layer.create(*data))
        path = _pan_path(viewer, app)
        probe.start()
        ends: list[int] = []
        _pan(viewer, app, probe, max(FLOOR_PASSES, passes), path, ends)
        probe.stop()
        gaps["pan"], gaps["ends"] = list(probe.gaps_ms), ends
        probe.start()
        for data in dock_layers:
            viewer.add_layer(Layer.create(*data))
            _settle(app, 0.05)
        _settle(app, 0.5)
        probe.stop()
        gaps["layers"] = list(probe.gaps_ms)
        probe.start()  # the same passes again, the dock's layers in the viewer as in the plugin's
        with_layers: list[int] = []
        _pan(viewer, app, probe, max(1, passes), path, with_layers)
        probe.stop()
        gaps["pan_layers"], gaps["ends_layers"] = list(probe.gaps_ms), with_layers
        from napari_medvl._napari_compat import skip_draw_updates_while_hidden

        for layer in list(viewer.layers)[len(views) :]:  # what the plugin's add_layer does
            skip_draw_updates_while_hidden(layer)
        probe.start()
        skipping: list[int] = []
        _pan(viewer, app, probe, max(1, passes), path, skipping)
        probe.stop()
        gaps["pan_skipping"] = list(probe.gaps_ms)
        for name, shown in (
            ("result", result_view),  # the first result shown, the other breast's hidden
            ("both", both_view),  # after the second breast's run: both results shown
            ("both_maps", [(d, v and d[2] == "image") for d, v in both_view]),
            ("both_shapes", [(d, v and d[2] == "shapes") for d, v in both_view]),
            ("both_plugin", both_view),  # both again, empty highlights hidden as the plugin's
        ):
            gaps[f"pan_{name}"], gaps[f"ends_{name}"] = _pan_showing(
                viewer,
                app,
                probe,
                len(views),
                shown,
                max(1, passes),
                path,
                name == "both_plugin",
            )
    return gaps


def _pan_showing(
    viewer,
    app,
    probe,
    views: int,
    shown: list,
    passes: int,
    path: dict[str, float],
    hide_highlights: bool = False,
) -> tuple[list[float], list[int]]:
    """Replace the layers above the first ``views`` with ``shown`` ((layer data, visible)
    pairs; hidden ones skip napari's per-draw update, as the plugin's do; with
    ``hide_highlights`` shapes layers draw no empty highlight, as the plugin's do) and pan
    ``passes`` passes; the gaps and the passes' tick counts."""
    from napari.layers import Layer

    from napari_medvl._napari_compat import hide_empty_highlights, skip_draw_updates_while_hidden

    for layer in list(viewer.layers)[views:]:
        viewer.layers.remove(layer)
    for data, visible in shown:
        layer = viewer.add_layer(Layer.create(*data))
        layer.visible = visible
        skip_draw_updates_while_hidden(layer)
        if hide_highlights and data[2] == "shapes":
            hide_empty_highlights(viewer, layer)
    _settle(app, 0.5)
    probe.start()
    ends: list[int] = []
    _pan(viewer, app, probe, passes, path, ends)
    probe.stop()
    return list(probe.gaps_ms), ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", action="store_true", help="models in napari's process")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="plugin/floor rounds")
    gap_stacks.add_arguments(parser, "first TopK")
    arguments = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["MEDVL_MODEL_PROCESS"] = "0" if arguments.threads else "1"
    from qtpy.QtWidgets import QApplication

    from napari_medvl._stall_probe import StallProbe

    app = QApplication.instance() or QApplication([])
    probe = StallProbe()
    stacks = gap_stacks.from_arguments(arguments, probe)
    with tempfile.TemporaryDirectory() as scratch:
        paths = write_exam(Path(scratch))
        print(
            f"synthetic four-view exam, {len(paths)} views of 1024 x 640 px; TopK on L CC + "
            f"L MLO, then R; MEDVL_MODEL_PROCESS={os.environ['MEDVL_MODEL_PROCESS']}"
        )
        floor_old, floor_fair, floor_layers, first = Pans(), Pans(), Pans(), Pans()
        floor_result = Pans()
        showing_both: dict[str, list[float]] = {
            name: [] for name in ("both", "both_maps", "both_shapes", "both_plugin")
        }
        skipping: list[float] = []
        layers: list[float] = []
        plugin: dict[str, list[float]] = {"dock": [], "second": []}
        details, runs = [], []
        for index in range(arguments.rounds):
            run = plugin_round(app, probe, paths, stacks)
            for key in plugin:
                plugin[key].extend(run[key])  # type: ignore[arg-type]
            first.add(run["first"], run["ends"])  # type: ignore[arg-type]
            runs.append(run)
            passes = int(run["passes"])  # type: ignore[call-overload]
            floor = floor_round(
                app,
                probe,
                run["views"],  # type: ignore[arg-type]
                run["dock_layers"],  # type: ignore[arg-type]
                passes,
                run["canvas"],  # type: ignore[arg-type]
                run["result_view"],  # type: ignore[arg-type]
                run["both_view"],  # type: ignore[arg-type]
            )
            gaps, ends = floor["pan"], floor["ends"]
            floor_old.add(gaps[: ends[FLOOR_PASSES - 1]], ends[:FLOOR_PASSES])  # type: ignore[index]
            floor_fair.add(gaps[: ends[passes - 1]], ends[:passes])  # type: ignore[index]
            layers.extend(floor["layers"])  # type: ignore[arg-type]
            floor_layers.add(floor["pan_layers"], floor["ends_layers"])  # type: ignore[arg-type]
            skipping.extend(floor["pan_skipping"])  # type: ignore[arg-type]
            floor_result.add(floor["pan_result"], floor["ends_result"])  # type: ignore[arg-type]
            for name in showing_both:
                showing_both[name].extend(floor[f"pan_{name}"])  # type: ignore[arg-type]
            details.append(
                f"round {index + 1}: first TopK {run['first_s']:.1f} s over {passes} pan "
                f"passes; TopK ran in {run['where']}; "
                f"{len(run['dock_layers'])} layers added by the dock; canvas (h x w) "  # type: ignore[arg-type]
                f"plugin {run['canvas'][0]} x {run['canvas'][1]}, "  # type: ignore[index]
                f"floor {floor['canvas'][0]} x {floor['canvas'][1]} px"  # type: ignore[index]
            )
            details.extend(f"  {line}" for line in run.get("stacks", []))  # type: ignore[attr-defined]
        print(f"{arguments.rounds} rounds, plugin and floor alternated:")
        for line in details:
            print(f"  {line}")
        print(_line(f"floor: pan, {FLOOR_PASSES} passes a round", floor_old.gaps))
        print(_line("floor: pan, the plugin's passes", floor_fair.gaps))
        print(_line("floor: adding the dock's layers", layers))
        print(_line("floor: pan with the dock's layers", floor_layers.gaps))
        print(_line("  the hidden ones skipping draw updates", skipping))
        print(_line("floor: pan showing the first TopK's result", floor_result.gaps))
        print(_line("floor: pan showing both breasts' results", showing_both["both"]))
        print(_line("  their importance maps only", showing_both["both_maps"]))
        print(_line("  their boxes and labels only", showing_both["both_shapes"]))
        print(_line("  both, empty highlights hidden (plugin's)", showing_both["both_plugin"]))
        print(_line("plugin: dock opening", plugin["dock"]))
        print(_line("plugin: first TopK, panning", first.gaps))
        print(_line("plugin: second breast's TopK", plugin["second"]))
        for line in comparison_table(first, floor_old, floor_fair, "first TopK"):
            print(line)
        for name, floor_gaps in (
            ("with the dock's layers", floor_layers.gaps),
            ("showing the first TopK's result", floor_result.gaps),
        ):
            print(
                f"  first TopK against the floor {name}: worst "
                f"{max(first.gaps) / max(floor_gaps):.2f}x, p99 "
                f"{np.percentile(first.gaps, 99) / np.percentile(floor_gaps, 99):.2f}x "
                f"({len(first.gaps)}/{len(floor_gaps)} ticks)"
            )
        second = plugin["second"]
        for line in other_ratios(
            second, plugin["dock"], layers, floor_old, floor_fair, "second breast"
        ):
            print(line)
        threshold = 1.5 * float(np.percentile(floor_fair.gaps, 99))
        print("  first TopK, what its long gaps held (1.5x the floor's p99):")
        for index, run in enumerate(runs):
            said = attribute(run["first"], run["first_ends"], run["marks"], threshold)  # type: ignore[arg-type]
            print(f"    round {index + 1}: {said}")
            costs = fill_costs(run["first"], run["first_ends"], run["marks"])  # type: ignore[arg-type]
            print(f"      its fills, each one's time on the GUI thread: {costs}")
        print(f"  closed viewers still held after a full collection: {closed_viewers_held()}")


if __name__ == "__main__":
    main()
