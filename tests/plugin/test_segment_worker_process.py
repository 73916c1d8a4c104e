"""The segment dock's work in the model process: its result crosses the pipe without torch and
is recounted in napari's process; a dock run in a fresh napari maps the slide as the engine
does while napari's process never imports torch; a missing model is its sentence, a cancel
is at once, and a class new to a run shows the map of the known ones first; where no process
starts, the job runs in threads and says so once."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

from medvl_engine.errors import ModelNotFoundError
from napari_medvl import _worker_process
from napari_medvl._worker_process import ENV_SWITCH, ModelProcess
from tests.support.model_process import assert_stopped_with_viewer, finished, run_probe


def _result():
    """A segmentation of a 6 x 4 patch grid (two classes, left and right halves) from a
    store whose features hold their torch tensor, as the child's stores do."""
    from medvl_engine.features import FeatureStore
    from medvl_engine.segmentation import segment_store

    xs, ys = np.meshgrid(np.arange(6) * 224, np.arange(4) * 224)
    coords = np.stack([xs.ravel(), ys.ravel()], axis=1)
    features = np.zeros((24, 4), np.float32)
    features[:, 0] = coords[:, 0] < 3 * 224
    features[:, 1] = coords[:, 0] >= 3 * 224
    store = FeatureStore(
        features=features,
        coords=coords,
        patch_size_level0=224,
        patch_size=224,
        mpp=(0.5, 0.5),
        slide_dimensions=(6 * 224, 4 * 224),
        encoder="m",
    )
    assert store.torch_features is not None  # cached with the store, as in the child
    classes = {"tumor": ("tumor",), "stroma": ("stroma",)}
    embeddings = np.eye(2, 4, dtype=np.float32)  # [K, D]
    return segment_store(store, classes, embeddings, min_area_um2=0.0, slide_dimensions=(1344, 896))


UNPICKLE = r"""
import json, pickle, sys
import numpy as np
from napari_medvl._segment_layers import recount

result = pickle.loads(open(sys.argv[1], "rb").read())
labels = result.class_map.labels.copy()
labels[:, 3] = 1  # one column of stroma painted tumor
edited = recount(result, labels)
print(json.dumps({
    "torch": "torch" in sys.modules,
    "store": type(result.store).__name__,
    "coords": result.store.coords.tolist(),
    "labels": result.class_map.labels.tolist(),
    "table": edited.table,
}))
"""


def test_a_segment_result_crosses_to_napari_without_torch_and_is_recounted_there(tmp_path):
    from napari_medvl._segment_layers import recount
    from napari_medvl._worker_segment import portable_result

    result = _result()
    assert b"torch" in pickle.dumps(result)  # the store's tensor: this must not cross
    portable = pickle.dumps(portable_result(result))
    assert b"torch" not in portable
    (tmp_path / "result.pickle").write_bytes(portable)
    done = subprocess.run(
        [sys.executable, "-c", UNPICKLE, str(tmp_path / "result.pickle")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    there = json.loads(done.stdout.splitlines()[-1])
    assert there["torch"] is False  # unpickled and recounted without importing torch
    assert there["store"] == "StoreSummary"
    assert there["coords"] == result.store.coords.tolist()
    np.testing.assert_array_equal(there["labels"], result.class_map.labels)
    assert (result.class_map.labels[:, :3] == 1).all() and (
        result.class_map.labels[:, 3:] == 2
    ).all()
    labels = result.class_map.labels.copy()
    labels[:, 3] = 1
    here = recount(result, labels).table
    assert there["table"] == json.loads(json.dumps(here))
    rows = {row["class"]: row["cells"] for row in there["table"]}
    assert (rows["tumor"], rows["stroma"]) == (16, 8)


def test_without_a_process_the_job_runs_in_threads_and_says_so_once(
    monkeypatch, caplog, small_slide
):
    from medvl_engine.io.slide import open_slide
    from napari_medvl._segment_job import SegmentCache, SegmentRequest, segment_job

    monkeypatch.setenv(ENV_SWITCH, "1")
    monkeypatch.setattr(_worker_process, "_shared", None)
    monkeypatch.setattr(_worker_process, "_unavailable", None)
    started = []

    def refuse(self, cancel=None):
        started.append(self)
        raise OSError("no processes here")

    monkeypatch.setattr(ModelProcess, "start", refuse)
    classes = {"tumor": ("tumor",), "stroma": ("stroma",)}
    with open_slide(small_slide.path) as slide, caplog.at_level("WARNING"):
        for _ in range(2):  # the model is loaded here, and its error is the engine's sentence
            with pytest.raises(ModelNotFoundError, match="no-such-model"):
                finished(
                    segment_job(SegmentRequest(slide, "no-such-model", classes), SegmentCache())
                )
    said = [record.message for record in caplog.records if "model process" in record.message]
    assert len(started) == 1 and len(said) == 1 and "no processes here" in said[0]


PROBE = r"""
import json, sys, threading, time
import numpy as np
import napari, npe2
from qtpy.QtWidgets import QApplication
from napari_medvl._segment_job import (
    SegmentCache, SegmentRequest, embeddings_ready, segment_job,
)
from napari_medvl._segment_widget import SegmentWidget
from napari_medvl import _worker_process

slide_path, out = sys.argv[1], sys.argv[2]
viewer = napari.Viewer(show=False)
app = QApplication.instance()
npe2.PluginManager.instance().discover()
layer = viewer.open(slide_path, plugin="napari-medvl")[0]
widget = SegmentWidget(viewer, cache=SegmentCache())
stages = []
widget.runner.after_progress = lambda progress: stages.append(progress.stage)


def wait():
    end = time.time() + 240
    while widget.runner.running and time.time() < end:
        app.processEvents()
        time.sleep(0.01)
    for _ in range(5):
        app.processEvents()


widget.templates.value = "none"
widget.classes.value = "tumor=carcinoma\nstroma\nadipose=adipose tissue, fat"
widget.run()
wait()
first_error = repr(widget.runner.last_error)
name = f"tissue map: {layer.metadata['slide'].path.name}"
np.save(out + "-first.npy", np.asarray(viewer.layers[name].data))
table = widget.table.value.splitlines()
widget.classes.value = "adipose=adipose tissue, fat\ntumor=carcinoma\nnecrosis"
thread = widget.controller.prefetch()
if thread is not None:
    thread.join(60)
classes = {"adipose": ("adipose", "adipose tissue", "fat"), "tumor": ("tumor", "carcinoma"),
           "necrosis": ("necrosis",)}
cache = widget.controller.cache
prefetched = embeddings_ready(cache, "medvl-demo", "none", classes)
widget.run()
wait()
np.save(out + "-changed.npy", np.asarray(viewer.layers[name].data))
looks = []
show_first_look = widget.runner.on_partial


def first_look(look):
    looks.append([list(look.result.names), list(look.pending), type(look.result.store).__name__])
    show_first_look(look)


widget.runner.on_partial = first_look
widget.classes.value = "adipose=adipose tissue, fat\ntumor=carcinoma\nnecrosis\nmucin=mucus"
widget._prefetch_timer.stop()  # Run at once: the run itself encodes the new class
widget.run()
wait()
slide = layer.metadata["slide"]
try:
    for _ in segment_job(SegmentRequest(slide, "no-such-model", classes), SegmentCache()):
        pass
    missing = None
except Exception as error:
    missing = [type(error).__name__, str(error)]
cancel = threading.Event()
steps = segment_job(SegmentRequest(slide, "medvl-demo", classes, overlap=4), cache, cancel)
cancelled, started = None, None
try:
    for progress in steps:
        if progress.stage == "features" and started is None:
            started = time.perf_counter()
            cancel.set()
except Exception as error:
    cancelled = [type(error).__name__, str(error), time.perf_counter() - started]
process = _worker_process._shared
child = process.call("napari_medvl._worker_process:status_in_child", ["torch"])
report = {
    "errors": [first_error, repr(widget.runner.last_error)],
    "looks": looks,
    "last": list(widget.last_outcome.result.names),
    "torch": sorted(m for m in ("torch", "transformers") if m in sys.modules),
    "child_torch": child["imported"],
    "child": process.pid,
    "table": table,
    "prefetched": prefetched,
    "here": [len(cache.embeddings), len(cache.stores), type(cache.encoders["medvl-demo"]).__name__],
    "store": type(widget.last_outcome.result.store).__name__,
    "stages": sorted(set(stages)),
    "missing": missing,
    "cancelled": cancelled,
}
"""


@pytest.mark.gui
@pytest.mark.slow  # a fresh napari, the model process and the demo model: ~60 s on 2 cores
def test_the_dock_segments_in_the_model_process_as_the_engine_does(
    small_slide, medvl_cache, tmp_path
):
    from medvl_engine.encoders import load_encoder
    from medvl_engine.pathology import segment

    out = str(tmp_path / "labels")
    report = run_probe(PROBE, str(small_slide.path), out, timeout=400)
    assert report["errors"] == ["None", "None"]
    assert report["torch"] == []  # napari's process: model, features and text in the child
    assert report["child_torch"] == ["torch"]
    assert report["store"] == "StoreSummary"
    # a new class run at once: the map with its first wording crosses first, then the whole
    assert report["looks"] == [
        [["adipose", "tumor", "necrosis", "mucin"], ["mucin"], "StoreSummary"]
    ]
    assert report["last"] == ["adipose", "tumor", "necrosis", "mucin"]
    # napari's cache holds no embedding, store or model: the child does (and had the new
    # class's text encoded during the pause)
    assert report["prefetched"] is True
    assert report["here"] == [0, 0, "LoadedElsewhere"]
    assert {"loading model", "features"} <= set(report["stages"])
    assert [line.split()[0] for line in report["table"]] == [
        "tumor",
        "stroma",
        "adipose",
        "uncertain",
    ]
    encoder = load_encoder("medvl-demo")
    tumor, adipose = ("tumor", "carcinoma"), ("adipose", "adipose tissue", "fat")
    for suffix, classes in (
        ("first", {"tumor": tumor, "stroma": ("stroma",), "adipose": adipose}),
        ("changed", {"adipose": adipose, "tumor": tumor, "necrosis": ("necrosis",)}),
    ):
        engine = segment(small_slide.path, classes, encoder, templates="none")
        np.testing.assert_array_equal(np.load(f"{out}-{suffix}.npy"), engine.class_map.labels)
    error, sentence = report["missing"]
    assert error == "ModelNotFoundError" and "no-such-model" in sentence
    error, sentence, seconds = report["cancelled"]  # cancelled while the child extracts
    assert (error, sentence) == ("CancelledError", "The segmentation was cancelled.")
    assert seconds < 1.0
    assert_stopped_with_viewer(report)
