"""The first heatmap against bare napari's floor, measured interleaved in one run.

Floor (bare napari, nothing of napari-medvl but the 10 ms stall probe): a viewer of the stall
bench's window size, a blank dock narrowing its canvas to the plugin's (the dock takes that
width from the plugin's canvas), shows the 4096 x 4096 pyramid of a JPEG 2000 SVS copied into
memory (no reads, no decoding) and is panned at level 0 back and forth along one row (40 steps
of 120 screen px, one every 40 ms, per pass); then the two layers the heatmap dock adds when it
binds a slide (an empty heatmap image, a one-box shapes layer with a text label) are added to
it, as napari calls; then the plugin's complete map and top patches of that round replace them
and the floor pans as many passes as the plugin phase took ("floor showing the complete map":
the view the plugin draws once its maps arrive).
Plugin: a fresh viewer of the same size opens the same SVS with the plugin's reader, docks the
heatmap dock (adding its overlay layers: "dock opening"), clicks Run one second later with
the model NOT loaded (the model process is stopped before each round, so it starts, loads
the model and extracts the features) and pans the same path until the map is complete; then
five new prompts are run one after another ("re-prompt display").
Each round runs the plugin with napari's synchronous slicing (the reader gives its
progressive levels; napari's default, which the plugin keeps) and with asynchronous slicing
(the reader gives dask levels, decoded in napari's slicing thread; a user's opt-in in napari's
preferences), each followed by its own floor (the shared machine drifts: every plugin phase is
compared with the floor measured right after it). The floor always pans with bare napari's own
default, synchronous slicing. Prints worst and p99 gaps of every phase, per setting, and the
ratios the targets name: first heatmap worst <= 2x floor worst, p99 <= 1.5x floor p99;
re-prompt display worst <= 2x floor worst; dock opening worst <= 2x the floor's layer adding;
and the two settings' first-heatmap gaps against each other.
Two comparisons side by side, each with the samples behind it: "4 passes", the floor panned
for 4 passes per round (as this bench first did) against however many passes the plugin phase
took, so the plugin's worst is a maximum over several times more ticks; and "equal passes",
the floor panned in each round for as many passes as the plugin phase took in that round:
worst against worst, p99 against p99 over equal tick counts (the longer list cut to the
shorter, per round), and the median of the per-pass worst gaps against each other.
``--threads`` runs the models in napari's own process instead (as before the model process).
``--slide-in-memory`` and ``--hide-partials`` take one cost out of the plugin's rounds (the
slide's decoding, the partial maps' display) to show what it adds. ``--settings
sync,sync-at-once`` interleaves rounds whose partial maps wait for a still view (the dock's
way) with rounds that show each as it arrives. Each setting also says what its long gaps held
(a map display, a progress report, a garbage collection, a refresh for decoded slide blocks,
napari re-slicing the slide as the view moves: ``_gap_marks.py``).
Needs a display (run it under tools/with_display.sh).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import _gap_stacks as gap_stacks  # noqa: E402
from _gap_marks import attribute, mark_heatmap_work, stop_marking  # noqa: E402
from bench_plugin_stalls import (  # noqa: E402
    _settle,
    bench_viewer,
    canvas_size,
    closed_viewers_held,
    stand_in_dock,
    write_j2k_pyramid,
)

ROUNDS = 2
FLOOR_PASSES = 4
PAN_STEPS = 40
PAN_STEP_PX = 120
STEP_MS = 40
ROW_UM = 1050.0
REPROMPTS = ("stroma", "adipose tissue", "necrosis", "lymphocytes", "carcinoma")
RUN_AFTER_DOCK_S = 1.0
FIRST_HEATMAP_CAP_S = 240.0


def _pan_pass(viewer, app, probe, forward: bool, row: float = ROW_UM, start: float = 200.0) -> None:
    """One pass of ``PAN_STEPS`` steps along the row at level 0 (0.5 um/px at zoom 2), the
    camera's (y, x) centre going from (``row``, ``start``) ``PAN_STEPS`` steps to the right and
    back on the next pass."""
    camera = viewer.scene.camera
    step_um = PAN_STEP_PX / camera.zoom
    for step in range(1, PAN_STEPS + 1):
        index = step if forward else PAN_STEPS - step
        camera.center = (row, start + index * step_um)
        _settle(app, STEP_MS / 1e3)


def pan_passes(viewer, app, probe, passes: int, **path: float) -> list[int]:
    """``passes`` pan passes with ``probe`` running; the tick count after each pass."""
    ends = []
    for index in range(passes):
        _pan_pass(viewer, app, probe, forward=index % 2 == 0, **path)
        ends.append(len(probe.gaps_ms))
    return ends


def per_pass_worst(gaps: list[float], ends: list[int]) -> list[float]:
    """The worst gap of each pass (``ends``: the tick count after each pass)."""
    starts = [0, *ends[:-1]]
    return [max(gaps[a:b]) for a, b in zip(starts, ends, strict=True) if b > a]


@dataclass
class Pans:
    """Pan gaps gathered over rounds: every tick, the per-pass worst gaps, the passes, and
    per round the tick lists (to cut two phases to equal counts)."""

    gaps: list[float] = field(default_factory=list)
    pass_worst: list[float] = field(default_factory=list)
    rounds: list[list[float]] = field(default_factory=list)

    def add(self, gaps: list[float], ends: list[int]) -> None:
        self.gaps.extend(gaps)
        self.pass_worst.extend(per_pass_worst(gaps, ends))
        self.rounds.append(list(gaps))


def equal_counts(a: Pans, b: Pans) -> tuple[list[float], list[float]]:
    """Both phases' ticks with each round's longer list cut to the shorter one's length."""
    cut_a: list[float] = []
    cut_b: list[float] = []
    for gaps_a, gaps_b in zip(a.rounds, b.rounds, strict=True):
        n = min(len(gaps_a), len(gaps_b))
        cut_a.extend(gaps_a[:n])
        cut_b.extend(gaps_b[:n])
    return cut_a, cut_b


def comparison_table(plugin: Pans, floor_old: Pans, floor_fair: Pans, phase: str) -> list[str]:
    """The target ratios of ``phase`` (its pans, ``plugin``) to the floor, measured both ways:
    the floor's 4 passes a round (``floor_old``) and as many passes as the plugin's
    (``floor_fair``); each cell says the samples behind it (ticks or passes, plugin / floor)."""
    worst = max(plugin.gaps)
    p99 = float(np.percentile(plugin.gaps, 99))
    cut_plugin, cut_floor = equal_counts(plugin, floor_fair)
    median = float(np.median(plugin.pass_worst))
    rows = [
        (
            f"{phase} worst / floor worst (<= 2)",
            worst / max(floor_old.gaps),
            f"{len(plugin.gaps)}/{len(floor_old.gaps)} ticks",
            worst / max(floor_fair.gaps),
            f"{len(plugin.gaps)}/{len(floor_fair.gaps)} ticks",
        ),
        (
            f"{phase} p99 / floor p99 (<= 1.5)",
            p99 / float(np.percentile(floor_old.gaps, 99)),
            f"{len(plugin.gaps)}/{len(floor_old.gaps)} ticks",
            float(np.percentile(cut_plugin, 99)) / float(np.percentile(cut_floor, 99)),
            f"{len(cut_plugin)}/{len(cut_floor)} ticks",
        ),
        (
            f"{phase} median per-pass worst / floor's",
            median / float(np.median(floor_old.pass_worst)),
            f"{len(plugin.pass_worst)}/{len(floor_old.pass_worst)} passes",
            median / float(np.median(floor_fair.pass_worst)),
            f"{len(plugin.pass_worst)}/{len(floor_fair.pass_worst)} passes",
        ),
    ]
    lines = [f"  {'ratio':<50} {'floor 4 passes/round':>25} {'floor equal passes':>25}"]
    return lines + [ratio_line(*row) for row in rows]


def ratio_line(name: str, old: float, old_n: str, fair: float, fair_n: str) -> str:
    """One row of the comparison: the ratio against each floor and the samples behind it."""
    return f"  {name:<50} {old:5.2f}x {old_n:>18} {fair:5.2f}x {fair_n:>18}"


def _start_pan(viewer, app) -> None:
    viewer.scene.camera.zoom = 2.0
    viewer.scene.camera.center = (ROW_UM, 200.0)
    _settle(app, 1.0)


def _plain(layer) -> tuple:
    """A layer as napari layer data without the plugin's metadata (for the bare floor)."""
    data, state, kind = layer.as_layer_data_tuple()
    return data, {key: value for key, value in state.items() if key != "metadata"}, kind


def _units(slide_layer_metadata: dict) -> tuple[str, str]:
    """The slide layer's units (um), which its overlays share."""
    from napari_medvl._layer_frame import WorldFrame, layer_units

    return layer_units(WorldFrame.from_dict(slide_layer_metadata["world_frame"]))


def _pending_layers(slide_layer_metadata: dict) -> list:
    """The dock's two pending overlay layers for the slide, as napari layer data."""
    from napari_medvl._heatmap_overlay import overlay_key, pending_boxes_layer, pending_image_layer

    key = overlay_key(slide_layer_metadata.get("path", ""), "cosine")
    frame = slide_layer_metadata["world_frame"]
    return [pending_image_layer(key, frame, "cosine", {}), pending_boxes_layer(key, frame)]


def other_ratios(
    reprompt: list[float],
    dock: list[float],
    layers: list[float],
    floor_old: Pans,
    fair: Pans,
    label: str = "re-prompt",
) -> list[str]:
    """The ``label`` phase (re-prompt display) against both pan floors; dock opening against
    the floor's adding of the same layers (no panning: one number)."""
    worst = max(reprompt)
    dock_ratio = max(dock) / max(layers)
    samples = (
        f"{len(reprompt)}/{len(floor_old.gaps)} ticks",
        f"{len(reprompt)}/{len(fair.gaps)} ticks",
    )
    return [
        ratio_line(
            f"{label} worst / floor worst (<= 2)",
            worst / max(floor_old.gaps),
            samples[0],
            worst / max(fair.gaps),
            samples[1],
        ),
        ratio_line(
            "dock opening worst / layers floor worst (<= 2)",
            dock_ratio,
            f"{len(dock)}/{len(layers)} ticks",
            dock_ratio,
            "(no panning)",
        ),
    ]


def floor_round(
    app, probe, levels, scale, metadata, passes: int, canvas: tuple[int, int], map_layers: list
) -> dict[str, object]:
    """Bare napari with its default, synchronous slicing, a blank dock narrowing its canvas to
    the plugin's ``canvas`` size: pan the in-memory pyramid for max(FLOOR_PASSES, ``passes``)
    passes (the first FLOOR_PASSES alone are the old floor), then add the dock's two layers;
    then ``passes`` passes more showing ``map_layers`` (the plugin's complete map and top
    patches) over the slide, as the plugin's view does once its maps arrive."""
    from napari.settings import get_settings

    settings = get_settings()
    chosen = settings.experimental.async_
    settings.experimental.async_ = False  # bare napari's default
    try:
        return _floor_round(app, probe, levels, scale, metadata, passes, canvas, map_layers)
    finally:
        settings.experimental.async_ = chosen


def _floor_round(
    app, probe, levels, scale, metadata, passes: int, canvas: tuple[int, int], map_layers: list
) -> dict[str, object]:
    gaps: dict[str, object] = {}
    with bench_viewer(role="floor rounds") as viewer:
        gaps["canvas"] = stand_in_dock(viewer, app, canvas)
        viewer.add_image(
            levels, multiscale=True, rgb=True, scale=scale, units=_units(metadata), name="in memory"
        )
        _start_pan(viewer, app)
        probe.start()
        ends = pan_passes(viewer, app, probe, max(FLOOR_PASSES, passes))
        probe.stop()
        gaps["pan"], gaps["ends"] = list(probe.gaps_ms), ends
        probe.start()
        for data, kwargs, layer_type in _pending_layers(metadata):
            getattr(viewer, f"add_{layer_type}")(data, **kwargs)
            _settle(app, 0.05)
        _settle(app, 0.5)
        probe.stop()
        gaps["layers"] = list(probe.gaps_ms)
        for layer in list(viewer.layers)[1:]:
            viewer.layers.remove(layer)
        for data, kwargs, layer_type in map_layers:  # what the plugin's view shows at the end
            getattr(viewer, f"add_{layer_type}")(data, **kwargs)
        _start_pan(viewer, app)
        probe.start()
        gaps["ends_map"] = pan_passes(viewer, app, probe, passes)
        probe.stop()
        gaps["pan_map"] = list(probe.gaps_ms)
    return gaps


def plugin_round(
    app, probe, slide_path: Path, features: Path, stacks=None, partials_at_once: bool = False
) -> dict[str, object]:
    """The plugin: open, dock, Run after a second (model not loaded), pan until complete,
    then the re-prompts; ``stacks`` (a GapStacks) samples the first heatmap;
    ``partials_at_once``: each partial map is shown as it arrives, even mid-pan."""
    import npe2

    from napari_medvl._heatmap_job import FeatureCache
    from napari_medvl._heatmap_widget import HeatmapWidget
    from napari_medvl._worker_process import shutdown_model_process

    shutdown_model_process()  # the model is not loaded when Run is clicked
    result: dict[str, object] = {}
    with bench_viewer(role="plugin rounds") as viewer:
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
        result["dock"], result["canvas"] = list(probe.gaps_ms), canvas_size(viewer)
        _settle(app, max(0.0, RUN_AFTER_DOCK_S - 0.5))
        marks = mark_heatmap_work(viewer, widget)
        if partials_at_once:
            pacer = widget.presenter.partial_pacer
            pacer.still_ms = pacer.max_wait_ms = 0
        probe.start()
        if stacks is not None:
            stacks.start()
        started = time.perf_counter()
        widget.run()
        ends: list[int] = []
        while not ends or (
            widget.runner.running and time.perf_counter() - started < FIRST_HEATMAP_CAP_S
        ):
            _pan_pass(viewer, app, probe, forward=len(ends) % 2 == 0)
            ends.append(len(probe.gaps_ms))
        probe.stop()
        if stacks is not None:
            stacks.stop()
            result["stacks"] = stacks.report(focus=stacks.focus)
        result["map_layers"] = [
            _plain(overlay)
            for overlay in viewer.layers
            if overlay.metadata.get("overlay_key") and len(overlay.data)
        ]
        result["first"] = list(probe.gaps_ms)
        result["first_ends"] = list(probe.ends_s)
        stop_marking()
        result["marks"] = marks
        result["first_s"] = time.perf_counter() - started
        result["passes"] = len(ends)
        result["ends"] = ends
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


@dataclass
class Setting:
    """One slicing setting's phases gathered over the rounds."""

    name: str
    floor_old: Pans = field(default_factory=Pans)
    floor_fair: Pans = field(default_factory=Pans)
    first: Pans = field(default_factory=Pans)
    layers: list[float] = field(default_factory=list)
    dock: list[float] = field(default_factory=list)
    reprompt: list[float] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    first_runs: list[dict] = field(default_factory=list)  # each round's gaps, ends and marks
    floor_map: Pans = field(default_factory=Pans)  # the floor showing the plugin's final map

    def add_round(self, run: dict, floor: dict) -> None:
        """One plugin round and the floor round measured right after it."""
        self.dock.extend(run["dock"])
        self.reprompt.extend(run["reprompt"])
        self.first.add(run["first"], run["ends"])
        self.first_runs.append(run)
        passes = int(run["passes"])
        gaps, ends = floor["pan"], floor["ends"]
        self.floor_old.add(gaps[: ends[FLOOR_PASSES - 1]], ends[:FLOOR_PASSES])
        self.floor_fair.add(gaps[: ends[passes - 1]], ends[:passes])
        self.layers.extend(floor["layers"])
        self.floor_map.add(floor["pan_map"], floor["ends_map"])
        self.details.append(
            f"round {len(self.details) + 1}: first heatmap {run['first_s']:.1f} s over "
            f"{passes} pan passes; torch in napari's process: {run['torch']}; load "
            f"{run['load']}; canvas (h x w) plugin {run['canvas'][0]} x {run['canvas'][1]}, "
            f"floor {floor['canvas'][0]} x {floor['canvas'][1]} px"
        )

    def report(self, rounds: int) -> list[str]:
        lines = [f"{self.name} slicing ({rounds} rounds, each plugin phase then its floor):"]
        lines += [f"  {line}" for line in self.details]
        lines.append(_line(f"floor: pan, {FLOOR_PASSES} passes a round", self.floor_old.gaps))
        lines.append(_line("floor: pan, the plugin's passes", self.floor_fair.gaps))
        lines.append(_line("floor: adding the dock's two layers", self.layers))
        lines.append(_line("plugin: dock opening", self.dock))
        lines.append(_line("plugin: first heatmap, panning", self.first.gaps))
        lines.append(_line(f"plugin: {len(REPROMPTS)} re-prompts' display", self.reprompt))
        lines += comparison_table(self.first, self.floor_old, self.floor_fair, "first heatmap")
        (map_worst, map_p99), (first_worst, first_p99) = (
            _stats(self.floor_map.gaps),
            _stats(self.first.gaps),
        )
        lines.append(_line("floor: pan showing the complete map", self.floor_map.gaps))
        lines.append(
            "  first heatmap against the floor showing the complete map: worst "
            f"{first_worst / map_worst:.2f}x, p99 {first_p99 / map_p99:.2f}x "
            f"({len(self.first.gaps)}/{len(self.floor_map.gaps)} ticks)"
        )
        lines += other_ratios(
            self.reprompt, self.dock, self.layers, self.floor_old, self.floor_fair
        )
        threshold = 1.5 * _stats(self.floor_fair.gaps)[1]
        lines.append("  first heatmap, what its long gaps held (1.5x the floor's p99):")
        for index, run in enumerate(self.first_runs):
            said = attribute(run["first"], run["first_ends"], run["marks"], threshold)
            lines.append(f"    round {index + 1}: {said}")
        return lines


def settings_against_each_other(done: dict[str, Setting]) -> list[str]:
    """Each other setting against sync: first-heatmap worst and p99 gaps side by side."""
    if "sync" not in done:
        return []
    lines = []
    for other in (name for name in done if name != "sync"):
        lines.append(f"{other} / sync, first heatmap, panning (rounds interleaved):")
        for name, pick in (("worst", max), ("p99", lambda gaps: np.percentile(gaps, 99))):
            a, b = float(pick(done[other].first.gaps)), float(pick(done["sync"].first.gaps))
            lines.append(f"  {name:<6} {other} {a:7.1f} ms, sync {b:7.1f} ms: {a / b:5.2f}x")
    return lines


def _load() -> str:
    """The 1-minute load average now."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _diagnose(slide_in_memory: bool, hide_partials: bool) -> None:
    """Take one cost out of the plugin's rounds, to see what it adds: the slide's decoding (its
    reader's levels replaced by the pyramid in memory) or the partial maps' display."""
    if slide_in_memory:
        from napari_medvl import _slide_display

        def in_memory(slide, block_target_px: int = 0) -> list:
            return [np.asarray(level) for level in slide.levels]

        _slide_display.display_levels = in_memory  # the reader looks it up when it opens
        print("diagnosis: the plugin's slide is held in memory (no decoding)")
    if hide_partials:
        from napari_medvl._heatmap_presenter import HeatmapPresenter

        HeatmapPresenter.show_partial = lambda self, update: None  # type: ignore[method-assign]
        print("diagnosis: no partial map is shown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", action="store_true", help="models in napari's process")
    parser.add_argument(
        "--settings",
        default="sync,async",
        help="sync,async (both, the default), sync or async; sync-at-once: sync slicing with "
        "each partial map shown as it arrives, not when the view is still",
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="floor/plugin rounds")
    gap_stacks.add_arguments(parser, "first heatmap")
    parser.add_argument(
        "--slide-in-memory",
        action="store_true",
        help="diagnosis: the plugin's slide layer holds its pyramid in memory (no decoding)",
    )
    parser.add_argument(
        "--hide-partials",
        action="store_true",
        help="diagnosis: the dock shows no partial map, only the complete one",
    )
    arguments = parser.parse_args()
    if not set(arguments.settings.split(",")) <= {"sync", "async", "sync-at-once"}:
        parser.error(f"--settings {arguments.settings}: name sync, async or sync-at-once")
    _diagnose(arguments.slide_in_memory, arguments.hide_partials)
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
    stacks = gap_stacks.from_arguments(arguments, probe)
    with tempfile.TemporaryDirectory() as scratch:
        slide_path = write_j2k_pyramid(Path(scratch) / "j2k.svs")
        slide = open_slide(slide_path)
        levels = [np.asarray(level) for level in slide.levels]
        mpp_x, mpp_y = slide.mpp  # the plugin's layer: (y, x) um per level-0 px
        scale = (float(mpp_y), float(mpp_x))
        metadata = {"path": str(slide_path), "world_frame": slide_frame(slide.mpp).as_dict()}
        slide.close()
        where = "threads" if arguments.threads else "the model process"
        print(f"JPEG 2000 SVS 4096 x 4096; models in {where}; load {_load()}")
        done = {name: Setting(name) for name in arguments.settings.split(",")}
        try:
            for index in range(arguments.rounds):
                for name, setting in done.items():
                    settings.experimental.async_ = name == "async"
                    features = Path(scratch) / f"features-{name}-{index}"
                    run = plugin_round(
                        app, probe, slide_path, features, stacks, name == "sync-at-once"
                    )
                    for line in run.get("stacks", []):  # type: ignore[attr-defined]
                        print(f"{name} round {index + 1}: {line}", flush=True)
                    run["load"] = _load()
                    floor = floor_round(
                        app,
                        probe,
                        levels,
                        scale,
                        metadata,
                        int(run["passes"]),
                        run["canvas"],
                        run["map_layers"],
                    )
                    setting.add_round(run, floor)
        finally:
            settings.experimental.async_ = async_before
        for setting in done.values():
            for line in setting.report(arguments.rounds):
                print(line)
        for line in settings_against_each_other(done):
            print(line)
        print(f"closed viewers still held after a full collection: {closed_viewers_held()}")


if __name__ == "__main__":
    main()
