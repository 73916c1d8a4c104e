"""A viewer closed after a dock ran a job is freed, with the dock and its layers.

napari keeps every worker its ``create_worker`` starts in the window's task list, and keeps a
closed window alive (a theme connection it never disconnects): a dock whose job's worker sat
in that list kept its closed viewer, layers and all, and every full garbage collection then
walked them (a 175 ms pause on the GUI thread in ``bench/bench_first_topk.py``'s second round).
The docks' jobs are listed weakly (``napari_medvl._job_status``).
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import npe2
import pytest

from napari_medvl._job_status import PROVIDER

pytestmark = pytest.mark.gui


def _open(viewer, *paths):
    npe2.PluginManager.instance().discover()
    return [viewer.open(str(path), plugin="napari-medvl")[0] for path in paths]


def _held_by(target: object, levels: int = 40) -> str:
    """The chains of referrers that keep ``target`` alive, from each root down to it: a module's
    globals, or an object nothing tracked by the collector refers to (held by C code, such as a
    Qt connection). Breadth first, one scan of the collector's objects per level."""
    parent: dict[int, int | None] = {id(target): None}
    found: dict[int, object] = {id(target): target}
    modules = {id(vars(module)) for module in list(sys.modules.values()) if module is not None}
    frontier = [target]
    roots: list[int] = []
    for _ in range(levels):
        if not frontier or len(roots) >= 3:
            break
        ids = {id(item) for item in frontier}
        following: list[object] = []
        for referrer in gc.get_referrers(*frontier):
            key = id(referrer)
            if key in parent or isinstance(referrer, types.FrameType) or referrer is frontier:
                continue
            child = next((id(item) for item in gc.get_referents(referrer) if id(item) in ids), None)
            parent[key], found[key] = child, referrer
            if key in modules:
                roots.append(key)
            else:
                following.append(referrer)
        ours = {id(found), id(frontier), id(following), id(parent)}
        unheld = [
            item
            for item in frontier
            if item is not target
            and all(
                id(referrer) in ours or isinstance(referrer, types.FrameType)
                for referrer in gc.get_referrers(item)
            )
        ]
        roots.extend(id(item) for item in unheld[:3] if len(roots) < 3)
        frontier = following
    chains = []
    for root in roots[:3]:
        chain, step = [], root
        while step is not None:
            item = found[step]
            name = getattr(item, "__qualname__", None)
            if isinstance(item, dict):
                name = item.get("__name__") if step in modules else None
            chain.append(f"{type(item).__qualname__}{f' {name}' if name else ''}")
            step = parent[step]
        chains.append(" -> ".join(chain))
    return "; ".join(chains) or "no holder found"


def _refs_once_closed(qtbot, use_dock: Callable[[Any], Any]) -> dict[str, list]:
    """Open a viewer, let ``use_dock(viewer)`` dock a widget and run its job (returning the
    widget), close the viewer as napari's window does; weak references to what it held."""
    import napari

    viewer = napari.Viewer(show=False)
    widget = use_dock(viewer)
    refs = {
        "viewer": [weakref.ref(viewer)],
        "dock": [weakref.ref(widget)],
        "layers": [weakref.ref(layer) for layer in viewer.layers],
    }
    assert refs["layers"]
    viewer.close()
    qtbot.wait(50)  # the worker's last queued signals
    return refs


def _assert_freed(refs: dict[str, list]) -> None:
    gc.collect()
    alive = {name: sum(ref() is not None for ref in group) for name, group in refs.items()}
    viewer = refs["viewer"][0]()
    holder = _held_by(viewer) if viewer is not None else ""
    del viewer
    assert not any(alive.values()), f"alive after the viewer was closed: {alive}; {holder}"


def _dock_and_run(qtbot, viewer, widget, name: str, wait_for_runner, timeout_ms: int = 120_000):
    """Dock ``widget`` in ``viewer`` and run its job to the end, without an error."""
    viewer.window.add_dock_widget(widget, name=name)
    assert widget.run() is not None
    wait_for_runner(qtbot, widget.runner, timeout_ms)
    assert widget.runner.last_error is None, widget.runner.last_error
    return widget


def test_heatmap_dock_after_a_job_and_a_cancelled_one(
    qtbot, tmp_path, medvl_cache, small_slide, wait_for_runner
):
    from napari_medvl._heatmap_job import FeatureCache
    from napari_medvl._heatmap_widget import HeatmapWidget

    def use_dock(viewer):
        _open(viewer, small_slide.path)
        widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "features"))
        widget.prompts.value = "tumor"
        _dock_and_run(qtbot, viewer, widget, "heatmap", wait_for_runner)
        assert "heatmap: tumor" in viewer.layers
        widget.prompts.value = "stroma"
        cancelled = widget.run()
        assert cancelled is not None
        widget.runner.cancel()  # a generator left suspended in its worker
        qtbot.waitUntil(lambda: not cancelled.is_running, timeout=60_000)
        return widget

    _assert_freed(_refs_once_closed(qtbot, use_dock))


def test_topk_dock_after_a_job(qtbot, mammo_case, tiny_topk, wait_for_runner):
    from napari_medvl._topk_widget import TopKWidget

    def use_dock(viewer):
        cc, mlo = _open(viewer, mammo_case.cc_path, mammo_case.mlo_path)
        widget = TopKWidget(viewer)
        widget.cc_choice.value, widget.mlo_choice.value = cc, mlo
        widget.model.value = str(tiny_topk)
        _dock_and_run(qtbot, viewer, widget, "TopK", wait_for_runner)
        qtbot.waitUntil(lambda: not widget.drawing, timeout=60_000)
        assert any(layer.metadata.get("medvl_kind") == "topk" for layer in viewer.layers)
        return widget

    _assert_freed(_refs_once_closed(qtbot, use_dock))


def test_classification_dock_after_a_job(
    qtbot, tmp_path, medvl_cache, small_slide, wait_for_runner
):
    from napari_medvl._classify_job import ClassifyCache
    from napari_medvl._classify_widget import ClassifyWidget

    def use_dock(viewer):
        _open(viewer, small_slide.path)
        widget = ClassifyWidget(viewer, cache=ClassifyCache(root=tmp_path / "features"))
        _dock_and_run(qtbot, viewer, widget, "classify", wait_for_runner, 300_000)
        assert f"attention: {small_slide.path.name}" in viewer.layers
        return widget

    _assert_freed(_refs_once_closed(qtbot, use_dock))


def test_a_running_job_is_listed_for_napari_close_dialog_and_cancelled_through_it(
    qtbot, tmp_path, medvl_cache, small_slide, wait_for_runner
):
    import napari

    from napari_medvl._heatmap_job import FeatureCache
    from napari_medvl._heatmap_widget import HeatmapWidget

    viewer = napari.Viewer(show=False)
    try:
        _open(viewer, small_slide.path)
        widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "features"))
        widget.prompts.value = "tumor"
        manager = viewer.window._task_status_manager
        worker = widget.run()
        assert worker is not None
        assert manager.get_status() == [f"{PROVIDER}: heatmap job waiting"]
        qtbot.waitUntil(lambda: manager.get_status() != [f"{PROVIDER}: heatmap job waiting"])
        assert manager.get_status() == [f"{PROVIDER}: heatmap job running"]
        manager.cancel_all()  # what napari does when its window is closed while a job runs
        wait_for_runner(qtbot, widget.runner)
        assert not manager.is_busy()
        assert widget.runner.worker is None
        freed = weakref.ref(worker)
        del worker
        qtbot.wait(50)
        gc.collect()
        assert freed() is None  # the list holds no job once it has ended
    finally:
        viewer.close()
