"""TopK in the model process: the dock keeps the run's plain summary (no model), which
crosses the pipe and writes the same DICOM report as ``medvl topk``; a dock run in the real
model process gives the engine's boxes while napari's process never imports torch."""

from __future__ import annotations

import pickle

import numpy as np
import pydicom
import pytest

from napari_medvl._layer_frame import WorldFrame
from napari_medvl._topk_job import TopKRequest, topk_job
from tests.support.model_process import assert_stopped_with_viewer, finished, run_probe

VIEWS = ("CC", "MLO")


def _report_content(path) -> list[tuple[str, str]]:
    """Every (keyword, value) of an SR's content tree, in order, without what each writing
    makes new (tracking UIDs) or stamps (dates and times)."""

    def walk(sequence):
        for item in sequence:
            for element in item:
                if element.VR == "SQ":
                    yield element.keyword, "SQ"
                    yield from walk(element.value)
                elif element.VR not in ("DA", "TM", "DT") and element.keyword != "UID":
                    yield element.keyword, str(element.value)

    return list(walk(pydicom.dcmread(path).ContentSequence))


def _polylines(path) -> dict[str, np.ndarray]:
    """Tracking identifier ("CC #1") -> the box's closed polyline [5, 2] in the SR."""
    import highdicom as hd

    groups = hd.sr.srread(path).content.get_planar_roi_measurement_groups()
    return {
        str(group.tracking_identifier): np.asarray(group.roi.value).reshape(-1, 2)
        for group in groups
    }


def test_the_dock_writes_the_report_medvl_topk_writes_from_its_pickled_run(
    tmp_path, mammo_case, tiny_topk
):
    pytest.importorskip("highdicom")
    from medvl_engine.cli.main import main
    from medvl_engine.io.mammo import open_mammogram
    from napari_medvl._export_job import export_layer_metadata

    model = str(tiny_topk)
    cc, mlo = open_mammogram(mammo_case.cc_path), open_mammogram(mammo_case.mlo_path)
    frames = {view: WorldFrame() for view in VIEWS}
    outcome = finished(topk_job(TopKRequest(cc, mlo, model, 4, frames), {}))  # threads
    summary = pickle.loads(pickle.dumps(outcome.run))  # what the model process sends back
    assert type(summary).__name__ == "TopKRunSummary" and not hasattr(summary, "model")
    assert (summary.k, summary.evaluated_k, summary.image_size, summary.grid) == (4, 3, 256, 8)
    assert summary.sources() == {"CC": mammo_case.cc_path, "MLO": mammo_case.mlo_path}
    for view in VIEWS:
        np.testing.assert_array_equal(summary.boxes[view], outcome.result.boxes[view])
    assert summary.zero_shot == outcome.result.zero_shot and summary.zero_shot

    # the dock's export reads the layer's metadata (the summary, no model); medvl topk on the
    # same files writes from the engine's live run (a BreastTopK with its model)
    layer = next(kwargs for _, kwargs, _ in outcome.layers if kwargs["name"].endswith("boxes CC"))
    dock = export_layer_metadata({**layer["metadata"], "topk_run": summary}, tmp_path / "d.dcm")
    cli = tmp_path / "cli.dcm"
    argv = ["topk", str(mammo_case.cc_path), str(mammo_case.mlo_path), "--model", model]
    assert main([*argv, "--k", "4", "--out", str(cli)]) == 0

    content = _report_content(cli)
    assert _report_content(dock) == content
    texts = [value for keyword, value in content if keyword == "TextValue"]
    assert "tiny-topk" in texts and "K=4" in texts and "evaluated_K=3" in texts
    assert any(value.startswith("medvl ") for value in texts)  # the algorithm's version
    shown = _polylines(dock)
    assert len(shown) == 4
    for view in VIEWS:  # the boxes the dock draws, on the view they were found on
        for rank, (x0, y0, x1, y1) in zip(
            outcome.result.ranks[view], outcome.result.boxes[view], strict=True
        ):
            corners = shown[f"{view} #{rank}"]
            np.testing.assert_allclose(corners.min(axis=0), [x0, y0], rtol=1e-6)
            np.testing.assert_allclose(corners.max(axis=0), [x1, y1], rtol=1e-6)
    probabilities = sorted(float(value) for keyword, value in content if keyword == "NumericValue")
    for classes in outcome.result.zero_shot.values():  # every readout is in the report
        for p in classes.values():
            assert any(abs(p - value) < 1e-6 for value in probabilities)


def test_the_model_process_reads_each_view_with_the_voi_napari_shows_it_with(tmp_path, mammo_case):
    import shutil

    from medvl_engine.io.mammo import open_mammogram
    from medvl_engine.models.topksiglip_results import TopKViewSource

    path = shutil.copy(mammo_case.cc_path, tmp_path / "L_CC.dcm")
    dataset = pydicom.dcmread(path)  # a second, narrower window
    center, width = float(dataset.WindowCenter), float(dataset.WindowWidth)
    dataset.WindowCenter, dataset.WindowWidth = [center, center + width / 4], [width, width / 4]
    dataset.save_as(path)
    shown = open_mammogram(path, voi_index=1)  # what "VOI" in the dock re-reads
    source = pickle.loads(pickle.dumps(TopKViewSource.of(shown)))  # what the child gets
    assert source.voi_index == 1 and source.voi == shown.voi
    reread = open_mammogram(source.path, voi_index=source.voi_index)
    np.testing.assert_array_equal(reread.pixels, shown.pixels)
    assert not np.array_equal(reread.pixels, open_mammogram(path).pixels)


def test_views_made_in_memory_cross_to_the_model_process_as_they_are(
    monkeypatch, mammo_case, tiny_topk
):
    import dataclasses
    import threading
    from pathlib import Path

    from medvl_engine.io.mammo import open_mammogram
    from medvl_engine.models.topksiglip_results import TopKViewSource
    from napari_medvl import _topk_job, _worker_process
    from napari_medvl._child_jobs import LoadedElsewhere
    from napari_medvl._topk_job import view_for_child
    from napari_medvl._worker_topk import topk_in_child

    on_file = open_mammogram(mammo_case.cc_path)
    assert isinstance(view_for_child(on_file), TopKViewSource)  # the child reads the file
    in_memory = [
        dataclasses.replace(open_mammogram(path), path=Path(f"memory/{view}"))
        for path, view in ((mammo_case.cc_path, "CC"), (mammo_case.mlo_path, "MLO"))
    ]
    sent = []

    class ThroughThePipe:  # the model process, its pipe a pickle round trip
        def run(self, handler, payload, cancel=None, label="request"):
            sent.append(handler)
            return topk_in_child(pickle.loads(pickle.dumps(payload)), {}, threading.Event())

    monkeypatch.setattr(_worker_process, "model_process", lambda cancel=None: ThroughThePipe())
    request = TopKRequest(*in_memory, str(tiny_topk), 4)
    models: dict = {}
    summary = finished(_topk_job.topk_job(request, models, {}, None)).run
    # the job took the model process for them (no longer threads because of the path)
    assert sent == ["napari_medvl._worker_topk:topk_in_child"]
    assert isinstance(models[str(tiny_topk)], LoadedElsewhere)
    here = finished(_topk_job.topk_here(request, {}, {}, None))
    assert summary.sources() == {"CC": Path("memory/CC"), "MLO": Path("memory/MLO")}
    for view in VIEWS:
        np.testing.assert_array_equal(summary.boxes[view], here.boxes[view])
        np.testing.assert_allclose(summary.scores[view], here.scores[view], rtol=1e-6)


# run_probe appends CLOSE_AND_REPORT: the viewer is closed and the report printed
PROBE = r"""
import json, sys, time
import napari, npe2
from qtpy.QtWidgets import QApplication
from napari_medvl._export_job import export_layer_metadata
from napari_medvl._topk_widget import TopKWidget
from napari_medvl import _worker_process

cc_path, mlo_path, report_path = sys.argv[1], sys.argv[2], sys.argv[3]
viewer = napari.Viewer(show=False)
app = QApplication.instance()
npe2.PluginManager.instance().discover()
cc = viewer.open(cc_path, plugin="napari-medvl")[0]
mlo = viewer.open(mlo_path, plugin="napari-medvl")[0]
widget = TopKWidget(viewer)
widget.cc_choice.value, widget.mlo_choice.value = cc, mlo
stages = []
widget.runner.after_progress = lambda progress: stages.append(progress.stage)
widget.run()
end = time.time() + 300
while (widget.runner.running or widget.drawing or widget.last_outcome is None) and (
    time.time() < end and widget.runner.last_error is None
):
    app.processEvents()
    time.sleep(0.01)
outcome = widget.last_outcome
boxes = {
    view: viewer.layers[f"TopK {cc.metadata['laterality']} boxes {view}"] for view in ("CC", "MLO")
}
written = None
if outcome is not None:
    written = str(export_layer_metadata(dict(boxes["CC"].metadata), report_path))
process = _worker_process._shared

from napari_medvl._topk_job import TopKRequest, topk_job

views = (cc.metadata["mammogram"], mlo.metadata["mammogram"])
try:  # an error in the child comes back as its sentence
    for _ in topk_job(TopKRequest(*views, "no-such-topk"), {}):
        pass
    missing = None
except Exception as error:
    missing = [type(error).__name__, str(error)]
cancel = __import__("threading").Event()
steps = topk_job(TopKRequest(*views, "topksiglip-demo"), {}, cancel=cancel)
cancelled, started = None, None
try:
    for progress in steps:
        if progress.stage == "TopK-Patch" and started is None:
            started = time.perf_counter()
            cancel.set()
except Exception as error:
    cancelled = [type(error).__name__, str(error), time.perf_counter() - started]
report = {
    "error": repr(widget.runner.last_error),
    "torch": sorted(name for name in ("torch", "transformers") if name in sys.modules),
    "boxes": {view: outcome.result.boxes[view].tolist() for view in ("CC", "MLO")},
    "scores": {view: outcome.result.scores[view].tolist() for view in ("CC", "MLO")},
    "k": outcome.result.k,
    "layer_boxes": {  # the marks layer's boxes (its rims and label plates aside)
        view: int((layer.features["part"] == "box").sum()) for view, layer in boxes.items()
    },
    "run": type(boxes["CC"].metadata["topk_run"]).__name__,
    "models": {name: type(value).__name__ for name, value in widget.models.items()},
    "stages": sorted(set(stages)),
    "written": written,
    "missing": missing,
    "cancelled": cancelled,
    "child": process.pid if process is not None else None,
}
"""


@pytest.mark.gui
@pytest.mark.slow  # a fresh napari, the model process and the demo model: ~60 s on 2 cores
def test_a_topk_run_in_the_dock_runs_in_the_model_process_with_the_engines_boxes(
    medvl_cache, tmp_path
):
    pytest.importorskip("highdicom")
    from medvl_engine.mammography import topk
    from napari_medvl._sample_data import ensure_sample_mammograms

    cc_path, mlo_path = ensure_sample_mammograms()  # the plugin's sample pair (DICOM)
    report_path = tmp_path / "dock.dcm"
    report = run_probe(PROBE, str(cc_path), str(mlo_path), str(report_path), timeout=400)
    assert report["error"] == "None"
    assert report["torch"] == []  # napari's process: model and inference ran in the child
    assert report["run"] == "TopKRunSummary"
    assert report["models"] == {"topksiglip-demo": "LoadedElsewhere"}
    assert report["child"] is not None
    # the child's progress reached the dock ("reading views" is the child's own stage)
    assert {"reading views", "TopK-Patch", "building layers"} <= set(report["stages"])

    engine = topk(cc_path, mlo_path, "topksiglip-demo")  # here, with the model
    assert report["k"] == engine.k == 4
    for view in VIEWS:
        np.testing.assert_array_equal(report["boxes"][view], engine.boxes[view])
        np.testing.assert_allclose(report["scores"][view], engine.scores[view], rtol=1e-5)
        assert report["layer_boxes"][view] == len(engine.boxes[view])
    error, sentence = report["missing"]
    assert error == "ModelNotFoundError" and "no-such-topk" in sentence
    error, sentence, seconds = report["cancelled"]  # cancelled while the child runs TopK
    assert (error, sentence) == ("CancelledError", "The TopK request was cancelled.")
    assert seconds < 1.0
    assert report["written"] == str(report_path)  # the DICOM report, written without torch
    assert len(_polylines(report_path)) == engine.k
    assert_stopped_with_viewer(report)
