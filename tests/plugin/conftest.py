"""Fixtures of the plugin tests: a synthetic slide and mammogram pair, the model cache, and a
wait for a dock's background job."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def models_in_threads(monkeypatch):
    """The docks' jobs run in threads of the test's process, not in the model process: each
    test's viewer would start its own (importing torch and loading the model again, 10 - 20 s
    a test on two busy cores). The child runs the same job functions; test_worker_process.py
    and the stall test run them through the process."""
    from napari_medvl._worker_process import ENV_SWITCH

    monkeypatch.setenv(ENV_SWITCH, "0")


@pytest.fixture(scope="module")
def medvl_cache(request):
    """MEDVL_CACHE in pytest's own cache folder, so the demo model is fitted once, not per run.

    Only deterministic, versioned artefacts land there (the fitted demo model); feature
    stores of the tests go to their tmp_path. Set for the using module only.
    """
    folder = request.config.cache.mkdir("medvl-cache")
    previous = os.environ.get("MEDVL_CACHE")
    os.environ["MEDVL_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("MEDVL_CACHE", None)
    else:
        os.environ["MEDVL_CACHE"] = previous


SLIDE_CLASSES = ("tumor", "stroma", "adipose")


@pytest.fixture(scope="session")
def small_slide(tmp_path_factory):
    """A 1344 x 896 px synthetic H&E slide at 0.5 um/px with tumor, stroma and adipose."""
    from medvl_engine.synthetic import make_synthetic_slide

    folder = tmp_path_factory.mktemp("slide")
    return make_synthetic_slide(
        folder / "small.tiff", seed=5, size=(1344, 896), mpp=0.5, classes=SLIDE_CLASSES
    )


@pytest.fixture(scope="session")
def mammo_case(tmp_path_factory):
    """A synthetic left-breast CC + MLO pair (DICOM, 512 x 320 px) with one mass."""
    from medvl_engine.synthetic import make_mammogram_case

    folder = tmp_path_factory.mktemp("mammo")
    return make_mammogram_case(
        folder, seed=3, laterality="L", size=(512, 320), findings=["mass"], cancer=True
    )


def _wait_for_runner(qtbot, runner, timeout_ms: int = 120_000) -> None:
    """Wait until a widget's JobRunner has no job left running.

    The runner's own finished handler is connected before the worker starts, so unlike
    waiting on ``worker.finished`` after ``run()`` this cannot miss a job that ends at once.
    """
    qtbot.waitUntil(lambda: not runner.running, timeout=timeout_ms)


@pytest.fixture(scope="session")
def wait_for_runner():
    """``wait_for_runner(qtbot, runner, timeout_ms=120_000)`` waits until no job is running."""
    return _wait_for_runner


STALL_WORST_MS = 300.0
STALL_P99_MS = 200.0


@pytest.fixture(scope="session")
def idle_gaps():
    """``idle_gaps(qtbot)``: a StallProbe of the event loop left idle for one second (the
    machine's own noise, which the stall bounds allow twice over)."""
    from napari_medvl._stall_probe import StallProbe

    def _idle_gaps(qtbot):
        with StallProbe() as idle:
            qtbot.wait(1000)
        return idle

    return _idle_gaps


@pytest.fixture(scope="session")
def assert_within_stall_bounds():
    """``assert_within_stall_bounds(probe, idle, worst_ms=300, p99_ms=200)``: the probe's
    worst gap and p99 stay under the bounds plus twice the idle loop's (see
    test_heatmap_widget_stalls.py for how the bounds were measured)."""

    def _assert_within(probe, idle, worst_ms=STALL_WORST_MS, p99_ms=STALL_P99_MS):
        worst_bound = worst_ms + 2 * idle.worst_ms
        p99_bound = p99_ms + 2 * idle.percentile_ms(99)
        message = f"{probe.summary()}; idle: {idle.summary()}"
        assert probe.worst_ms < worst_bound, message
        assert probe.percentile_ms(99) < p99_bound, message

    return _assert_within


WORST_RATIO = 2.0
P99_RATIO = 1.5


@pytest.fixture(scope="session")
def assert_within_floor():
    """``assert_within_floor(gaps, floor, what)``: the event-loop gaps (ms) of a phase stay
    within ``WORST_RATIO`` x the floor's worst gap and ``P99_RATIO`` x its p99 (``p99_ratio``
    None: the worst only). The floor is bare napari drawing the same pyramid held in memory,
    panned along the same path in the same run (test_heatmap_widget_stalls.py)."""
    import numpy as np

    def _assert(gaps, floor, what, worst_ratio=WORST_RATIO, p99_ratio=P99_RATIO):
        worst, floor_worst = max(gaps), max(floor)
        p99, floor_p99 = np.percentile(gaps, 99), np.percentile(floor, 99)
        message = (
            f"{what}: worst {worst:.0f} ms, p99 {p99:.0f} ms ({len(gaps)} ticks); floor: worst "
            f"{floor_worst:.0f} ms, p99 {floor_p99:.0f} ms ({len(floor)} ticks)"
        )
        assert worst <= worst_ratio * floor_worst, message
        if p99_ratio is not None:
            assert p99 <= p99_ratio * floor_p99, message

    return _assert


@pytest.fixture
def sync_slicing():
    """napari's synchronous slicing, whatever the user's settings say: the slide's progressive
    levels alone keep decoding off the GUI thread."""
    from napari.settings import get_settings

    settings = get_settings()
    before = settings.experimental.async_
    settings.experimental.async_ = False
    yield
    settings.experimental.async_ = before


@pytest.fixture
def async_slicing():
    """napari's asynchronous slicing on, for this test only."""
    from napari.settings import get_settings

    settings = get_settings()
    before = settings.experimental.async_
    settings.experimental.async_ = True
    yield
    settings.experimental.async_ = before


@pytest.fixture
def fresh_napari_settings(tmp_path, monkeypatch):
    """What a user who never chose a slicing mode gets: napari's settings read from and saved
    to a file of this test's own (never the user's), no slicing named in the environment.
    Returns (``make(file_text=None)``, which makes the settings napari uses from then on,
    reading ``file_text`` as the settings file; the settings file's path; the notifications
    the plugin showed). Call ``make`` before ``make_napari_viewer``."""
    import napari.settings
    from napari.settings import NapariSettings

    from napari_medvl import _notify

    for name in ("NAPARI_ASYNC", "NAPARI_EXPERIMENTAL_ASYNC_"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "napari" / "settings.yaml"

    def make(file_text: str | None = None):
        if file_text is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(file_text)
        settings = NapariSettings(config_path=path)
        monkeypatch.setattr(napari.settings, "_SETTINGS", settings)
        return settings

    shown: list[str] = []
    monkeypatch.setattr(_notify, "report_info", shown.append)
    return make, path, shown
