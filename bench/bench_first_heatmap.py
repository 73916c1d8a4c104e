"""The first heatmap against bare napari's floor, measured interleaved in one run.

Floor (bare napari, nothing of napari-medvl but the 10 ms stall probe): a viewer of the stall
bench's window size shows the 4096 x 4096 pyramid of a JPEG 2000 SVS copied into memory (no
reads, no decoding) and is panned at level 0 back and forth along one row (40 steps of 120
screen px, one every 40 ms, per pass); then the two layers the heatmap dock adds when it
binds a slide (an empty heatmap image, a one-box shapes layer with a text label) are added
to it, as napari calls.
Plugin: a fresh viewer of the same size opens the same SVS with the plugin's reader, docks the
heatmap dock (adding its overlay layers: "dock opening"), clicks Run one second later with
the model NOT loaded (the model process is stopped before each round, so it starts, loads
the model and extracts the features) and pans the same path until the map is complete; then
five new prompts are run one after another ("re-prompt display").
Rounds alternate floor and plugin (the shared machine drifts), with napari's synchronous
slicing (the reader gives its progressive levels) and asynchronous slicing (the reader gives
dask levels, decoded in napari's slicing thread). Prints worst and p99 gaps of every phase,
per setting, and the ratios the targets name: first heatmap worst <= 2x floor worst, p99 <=
1.5x floor p99; re-prompt display worst <= 2x floor worst; dock opening worst <= 2x the floor's
layer adding. ``--threads`` runs the models in napari's own process instead (as before the
model process). Needs a display (run it under tools/with_display.sh).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from bench_plugin_stalls import _settle, bench_viewer, write_j2k_pyramid  # noqa: E402

ROUNDS = 2
FLOOR_PASSES = 4
PAN_STEPS = 40
PAN_STEP_PX = 120
STEP_MS = 40
ROW_UM = 1050.0
REPROMPTS = ("stroma", "adipose tissue", "necrosis", "lymphocytes", "carcinoma")
RUN_AFTER_DOCK_S = 1.0
FIRST_HEATMAP_CAP_S = 240.0


def _pan_pass(viewer, app, probe, forward: bool) -> None:
    """One pass of ``PAN_STEPS`` steps along the row at level 0 (0.5 um/px at zoom 2)."""
    camera = viewer.scene.camera
    step_um = PAN_STEP_PX / camera.zoom
    for step in range(1, PAN_STEPS + 1):
        index = step if forward else PAN_STEPS - step
        camera.center = (ROW_UM, 200.0 + index * step_um)
        _settle(app, STEP_MS / 1e3)


def _start_pan(viewer, app) -> None:
    viewer.scene.camera.zoom = 2.0
    viewer.scene.camera.center = (ROW_UM, 200.0)
    _settle(app, 1.0)


def _pending_layers(slide_layer_metadata: dict) -> list:
    """The dock's two pending overlay layers for the slide, as napari layer data."""
    from napari_medvl._heatmap_overlay import overlay_key, pending_boxes_layer, pending_image_layer

    key = overlay_key(slide_layer_metadata.get("path", ""), "cosine")
    frame = slide_layer_metadata["world_frame"]
    return [pending_image_layer(key, frame, "cosine", {}), pending_boxes_layer(key, frame)]


def floor_round(app, probe, levels, scale, metadata) -> dict[str, list[float]]:
    """Bare napari: pan the in-memory pyramid, then add the dock's two layers."""
    gaps: dict[str, list[float]] = {"pan": [], "layers": []}
    with bench_viewer() as viewer:
        viewer.add_image(levels, multiscale=True, rgb=True, scale=scale, name="in memory")
        _start_pan(viewer, app)
        probe.start()
        for index in range(FLOOR_PASSES):
            _pan_pass(viewer, app, probe, forward=index % 2 == 0)
        probe.stop()
        gaps["pan"] = list(probe.gaps_ms)
        probe.start()
        for data, kwargs, layer_type in _pending_layers(metadata):
            getattr(viewer, f"add_{layer_type}")(data, **kwargs)
            _settle(app, 0.05)
        _settle(app, 0.5)
        probe.stop()
        gaps["layers"] = list(probe.gaps_ms)
    return gaps


def plugin_round(app, probe, slide_path: Path, features: Path) -> dict[str, object]:
    """The plugin: open, dock, Run after a second (model not loaded), pan until complete,
    then the re-prompts."""
    import npe2

    from napari_medvl._heatmap_job import FeatureCache
    from napari_medvl._heatmap_widget import HeatmapWidget
    from napari_medvl._worker_process import shutdown_model_process

    shutdown_model_process()  # the model is not loaded when Run is clicked
    result: dict[str, object] = {}
    with bench_viewer() as viewer:
        npe2.PluginManager.instance().discover()
        layer = viewer.open(str(slide_path), plugin="napari-medvl")[0]
        _start_pan(viewer, app)
        probe.start()
        widget = HeatmapWidget(viewer, cache=FeatureCache(root=features))
        viewer.window.add_dock_widget(widget, name="heatmap")
        widget.slide_choice.value = layer
        while len(viewer.layers) < 3:  # the slide's overlay layers, added empty
            _settle(app, 0.05)
        _settle(app, 0.5)
        probe.stop()
        result["dock"] = list(probe.gaps_ms)
        _settle(app, max(0.0, RUN_AFTER_DOCK_S - 0.5))
        probe.start()
        started = time.perf_counter()
        widget.run()
        passes = 0
        while widget.runner.running and time.perf_counter() - started < FIRST_HEATMAP_CAP_S:
            _pan_pass(viewer, app, probe, forward=passes % 2 == 0)
            passes += 1
        probe.stop()
        result["first"] = list(probe.gaps_ms)
        result["first_s"] = time.perf_counter() - started
        result["passes"] = passes
        if widget.runner.last_error is not None:
            raise widget.runner.last_error
        gaps: list[float] = []
        for prompt in REPROMPTS:
            widget.prompts.value = prompt
            probe.start()
            widget.run()
            while widget.runner.running:
                _settle(app, 0.01)
            _settle(app, 0.3)
            probe.stop()
            gaps.extend(probe.gaps_ms)
        result["reprompt"] = gaps
        result["torch"] = "torch" in sys.modules
    return result


def _stats(gaps: list[float]) -> tuple[float, float]:
    return (max(gaps), float(np.percentile(gaps, 99))) if gaps else (float("nan"),) * 2


def _line(name: str, gaps: list[float]) -> str:
    worst, p99 = _stats(gaps)
    return f"  {name:<38}: worst {worst:7.1f} ms, p99 {p99:6.1f} ms, {len(gaps)} ticks"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", action="store_true", help="models in napari's process")
    parser.add_argument("--settings", default="sync,async", help="sync, async or both")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="floor/plugin rounds")
    arguments = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["MEDVL_MODEL_PROCESS"] = "0" if arguments.threads else "1"
    from napari.settings import get_settings
    from qtpy.QtWidgets import QApplication

    from medvl_engine.io.slide import open_slide
    from napari_medvl._slide_layers import slide_frame
    from napari_medvl._stall_probe import StallProbe

    settings = get_settings()
    async_before = settings.experimental.async_
    app = QApplication.instance() or QApplication([])
    probe = StallProbe()
    with tempfile.TemporaryDirectory() as scratch:
        slide_path = write_j2k_pyramid(Path(scratch) / "j2k.svs")
        slide = open_slide(slide_path)
        levels = [np.asarray(level) for level in slide.levels]
        mpp_x, mpp_y = slide.mpp  # the plugin's layer: (y, x) um per level-0 px
        scale = (float(mpp_y), float(mpp_x))
        metadata = {"path": str(slide_path), "world_frame": slide_frame(slide.mpp).as_dict()}
        slide.close()
        where = "threads" if arguments.threads else "the model process"
        print(f"JPEG 2000 SVS 4096 x 4096; models in {where}")
        try:
            for setting in arguments.settings.split(","):
                settings.experimental.async_ = setting == "async"
                floors: dict[str, list[float]] = {"pan": [], "layers": []}
                plugin: dict[str, list[float]] = {"dock": [], "first": [], "reprompt": []}
                details = []
                for index in range(arguments.rounds):
                    features = Path(scratch) / f"features-{setting}-{index}"
                    for gaps in (floor_round(app, probe, levels, scale, metadata),):
                        for key, value in gaps.items():
                            floors[key].extend(value)
                    run = plugin_round(app, probe, slide_path, features)
                    for key in plugin:
                        plugin[key].extend(run[key])  # type: ignore[arg-type]
                    details.append(
                        f"round {index + 1}: first heatmap {run['first_s']:.1f} s over "
                        f"{run['passes']} pan passes; torch in napari's process: {run['torch']}"
                    )
                print(
                    f"{setting} slicing ({arguments.rounds} rounds, floor and plugin alternated):"
                )
                for line in details:
                    print(f"  {line}")
                print(_line("floor: pan, in-memory pyramid", floors["pan"]))
                print(_line("floor: adding the dock's two layers", floors["layers"]))
                print(_line("plugin: dock opening", plugin["dock"]))
                print(_line("plugin: first heatmap, panning", plugin["first"]))
                print(_line(f"plugin: {len(REPROMPTS)} re-prompts' display", plugin["reprompt"]))
                floor_worst, floor_p99 = _stats(floors["pan"])
                first_worst, first_p99 = _stats(plugin["first"])
                ratios = {
                    "first heatmap worst / floor worst (<= 2)": first_worst / floor_worst,
                    "first heatmap p99 / floor p99 (<= 1.5)": first_p99 / floor_p99,
                    "re-prompt worst / floor worst (<= 2)": _stats(plugin["reprompt"])[0]
                    / floor_worst,
                    "dock opening worst / layers floor worst (<= 2)": _stats(plugin["dock"])[0]
                    / _stats(floors["layers"])[0],
                }
                for name, ratio in ratios.items():
                    print(f"  ratio {name:<48}: {ratio:5.2f}x")
        finally:
            settings.experimental.async_ = async_before


if __name__ == "__main__":
    main()
