"""The reader opens ``dicomweb://`` studies and series from a PACS as it opens local files.

The default tier checks the name matching and the refusals without a server; the slow tier
starts a real Orthanc with its DICOMweb plugin, uploads a mammography exam with its TopK
results and a DICOM slide with its heatmap objects, and compares what ``viewer.open`` builds
from the server with what it builds from the same files on disk.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pydicom
import pytest
from napari.components import ViewerModel
from napari.layers import Layer

from napari_medvl._reader import NULL_LAYER, get_reader, read_paths
from tests.support.orthanc import OrthancServer, orthanc_missing, running_orthanc
from tests.support.slide_results import write_slide_with_results


@pytest.fixture(autouse=True, scope="module")
def _discover_plugins():
    import npe2

    npe2.PluginManager.instance().discover()


@pytest.fixture(autouse=True)
def _local_servers_without_proxy(monkeypatch):
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")


@pytest.fixture
def shown(monkeypatch) -> list[str]:
    """The sentences the reader shows as napari notifications."""
    sentences: list[str] = []
    monkeypatch.setattr("napari_medvl._reader.report_error", lambda e: sentences.append(str(e)))
    return sentences


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_dicomweb_references_go_to_this_reader_and_nothing_else_does():
    import npe2

    url = "dicomweb://pacs:8042/dicom-web/studies/1.2.3"
    assert get_reader(url) is read_paths
    assert get_reader("dicomwebs://pacs/dicom-web/studies/1.2.3") is read_paths
    assert get_reader("http://example.org/picture.gif") is None
    readers = npe2.PluginManager.instance().iter_compatible_readers([url])
    assert "napari-medvl.get_reader" in {reader.command for reader in readers}


def test_a_server_that_is_down_is_one_sentence_and_no_layer(shown, monkeypatch):
    url = f"dicomweb://127.0.0.1:{_closed_port()}/dicom-web/studies/1.2.3"
    viewer = ViewerModel()
    monkeypatch.setattr("napari.current_viewer", lambda: viewer)
    # no plugin named: how `napari dicomweb://...` on the command line opens it
    assert viewer.open(url, plugin=None) == [] and len(viewer.layers) == 0
    (sentence,) = shown
    assert "127.0.0.1" in sentence and "Traceback" not in sentence
    assert sentence.count(". ") == 0 and sentence.endswith(".")


def test_a_whole_server_or_a_bad_uid_is_refused_in_one_sentence(shown):
    assert read_paths("dicomweb://pacs:8042/dicom-web") == NULL_LAYER
    assert read_paths("dicomweb://pacs:8042/dicom-web/studies/1.2.x") == NULL_LAYER
    assert "names a whole server; add /studies/UID" in shown[0]
    assert "'1.2.x' is not a DICOM UID" in shown[1]


# --------------------------------------------------------------------------- with Orthanc


@pytest.fixture(scope="module")
def orthanc(tmp_path_factory) -> OrthancServer:
    reason = orthanc_missing()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("dicomweb_client", reason="dicomweb-client is not installed")
    with running_orthanc(tmp_path_factory.mktemp("orthanc")) as server:
        yield server


@pytest.fixture
def server(orthanc, tmp_path, monkeypatch) -> OrthancServer:
    """The module's Orthanc, empty, with this test's own medvl cache."""
    orthanc.clear()
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    return orthanc


def _study(path: Path) -> str:
    return str(pydicom.dcmread(path, stop_before_pixels=True).StudyInstanceUID)


def _open(viewer: ViewerModel, monkeypatch, paths) -> list[Layer]:
    """``viewer.open`` with this plugin, ``viewer`` being napari's current viewer."""
    monkeypatch.setattr("napari.current_viewer", lambda: viewer)
    return viewer.open(paths, plugin="napari-medvl")


@pytest.mark.slow
def test_a_mammography_study_opens_hung_with_its_results_as_the_local_files_do(
    server, tmp_path, monkeypatch
):
    from medvl_engine.cli.main import main
    from medvl_engine.export.dicom import write_topk_dicom
    from medvl_engine.mammography import topk
    from medvl_engine.synthetic import make_mammogram_case
    from napari_medvl._mammo_hanging import hang_views

    exam = tmp_path / "exam"
    for seed, side in ((1, "L"), (2, "R")):
        make_mammogram_case(exam, seed=seed, laterality=side, size=(256, 160), exam_id="x1")
    views = sorted(exam.glob("*.dcm"))
    left = [p for p in views if "_L_" in p.name]
    run = topk(*sorted(left, key=lambda p: "MLO" in p.name), "topksiglip-demo")
    results = write_topk_dicom(run, tmp_path / "out", model_name="topksiglip-demo")
    assert main(["send", *map(str, views + results), "--to", server.dicomweb]) == 0

    local = ViewerModel()
    _open(local, monkeypatch, [str(p) for p in views])
    hang_views(local)
    (sr,) = [p for p in results if p.name == "topk_sr.dcm"]
    local_boxes = [Layer.create(*data) for data in read_paths(str(sr))]

    remote = ViewerModel()
    _open(remote, monkeypatch, f"{server.dicomweb}/studies/{_study(views[0])}")
    images = {
        (layer.metadata["laterality"], layer.metadata["view"]): layer
        for layer in remote.layers
        if layer.metadata.get("medvl_kind") == "mammogram"
    }
    assert sorted(images) == [("L", "CC"), ("L", "MLO"), ("R", "CC"), ("R", "MLO")]
    for layer in local.layers:
        twin = images[(layer.metadata["laterality"], layer.metadata["view"])]
        np.testing.assert_array_equal(twin.data, layer.data)  # same windowing, same pixels
        assert twin.contrast_limits == layer.contrast_limits
        assert twin.colormap.name == layer.colormap.name
        np.testing.assert_allclose(twin.scale, layer.scale)
        np.testing.assert_allclose(twin.translate, layer.translate)
        assert twin.metadata["world_frame"] == layer.metadata["world_frame"]
        assert twin.metadata["pixel_spacing"] == layer.metadata["pixel_spacing"]
    # the translates place R CC | L CC over R MLO | L MLO
    assert images[("R", "CC")].translate[1] < 0 < images[("L", "CC")].translate[1]
    assert images[("R", "MLO")].translate[0] > images[("R", "CC")].translate[0]
    # the report's boxes lie on the views they were computed on, as when read locally
    boxes = [layer for layer in remote.layers if layer.metadata.get("medvl_result") == "SR"]
    assert len(boxes) == len(local_boxes) == 2
    for got, expected in zip(boxes, local_boxes, strict=True):
        assert got.name.startswith("SR: ")
        assert got.name.split(": ", 1)[1] == expected.name.split(": ", 1)[1]
        for a, b in zip(got.data, expected.data, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)
    kinds = {layer.metadata.get("medvl_result") for layer in remote.layers}
    assert {"SR", "GSPS", "PM"} <= kinds


@pytest.fixture
def dicom_slide(tmp_path):
    """A three-level DICOM slide (mpp 0.5) with a heatmap Parametric Map and top patches."""
    files, pm, ann = write_slide_with_results(tmp_path, levels=3)
    return files, [pm, ann]


@pytest.mark.slow
def test_a_slide_study_opens_lazily_in_micrometres_with_its_results(
    server, dicom_slide, tmp_path, monkeypatch
):
    from medvl_engine.cli.main import main
    from medvl_engine.io.slide import open_slide

    files, results = dicom_slide
    assert main(["send", *map(str, files + results), "--to", server.dicomweb]) == 0
    local = ViewerModel()
    _open(local, monkeypatch, str(files[0]))
    local_results = [Layer.create(*data) for path in results for data in read_paths(str(path))]

    remote = ViewerModel()
    _open(remote, monkeypatch, f"{server.dicomweb}/studies/{_study(files[0])}")
    (slide_layer,) = [
        layer for layer in remote.layers if layer.metadata.get("medvl_kind") == "slide"
    ]
    assert slide_layer.multiscale and [d.shape[:2] for d in slide_layer.data] == [
        (256, 320),
        (128, 160),
        (64, 80),
    ]
    assert slide_layer.units == local.layers[0].units
    assert {str(unit) for unit in slide_layer.units} == {"micrometer"}
    np.testing.assert_allclose(slide_layer.scale, local.layers[0].scale)
    np.testing.assert_allclose(slide_layer.scale, (0.5, 0.5))
    # only the coarsest level was fetched for the reader call
    cached = {p.name for p in (tmp_path / "cache").rglob("*.dcm")}
    uids = [pydicom.dcmread(p, stop_before_pixels=True).SOPInstanceUID for p in files]
    assert f"{uids[2]}.dcm" in cached and f"{uids[0]}.dcm" not in cached
    assert f"{uids[1]}.dcm" not in cached
    slide = slide_layer.metadata["slide"]
    with open_slide(files[0]) as original:
        np.testing.assert_array_equal(
            np.asarray(slide.read_region((64, 32), 0, (200, 150))),
            np.asarray(original.read_region((64, 32), 0, (200, 150))),
        )
    cached = {p.name for p in (tmp_path / "cache").rglob("*.dcm")}
    assert f"{uids[0]}.dcm" in cached and f"{uids[1]}.dcm" not in cached  # level 0 on demand
    # the map and the boxes land on the slide in micrometres, as when read locally
    placed = [layer for layer in remote.layers if layer.metadata.get("medvl_result")]
    assert sorted(layer.metadata["medvl_result"] for layer in placed) == ["ANN", "PM"]
    for expected in local_results:
        (got,) = [
            p for p in placed if p.metadata["medvl_result"] == expected.metadata["medvl_result"]
        ]
        np.testing.assert_allclose(got.scale, expected.scale)
        np.testing.assert_allclose(got.translate, expected.translate)
        if expected.metadata["medvl_result"] == "ANN":
            np.testing.assert_allclose(got.data[0].min(0), [64 * 0.5, 32 * 0.5])
            for a, b in zip(got.data, expected.data, strict=True):
                np.testing.assert_allclose(a, b)
        else:
            np.testing.assert_allclose(got.data, expected.data)
            assert got.metadata["slide"] is slide


@pytest.mark.slow
def test_an_unknown_study_or_one_without_images_is_one_sentence(server, tmp_path, shown):
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    from medvl_engine.io.dicomweb import send

    assert read_paths(f"{server.dicomweb}/studies/1.2.3.4") == NULL_LAYER
    assert "has nothing at" in shown[-1] and "medvl info on the server root" in shown[-1]

    ct = Dataset()
    ct.file_meta = FileMetaDataset()
    ct.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ct.file_meta.MediaStorageSOPClassUID = ct.SOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
    ct.file_meta.MediaStorageSOPInstanceUID = ct.SOPInstanceUID = generate_uid()
    ct.StudyInstanceUID, ct.SeriesInstanceUID = generate_uid(), generate_uid()
    ct.Modality, ct.PatientID = "CT", "x"
    ct.Rows = ct.Columns = 2
    ct.BitsAllocated, ct.BitsStored, ct.HighBit, ct.PixelRepresentation = 16, 16, 15, 0
    ct.SamplesPerPixel, ct.PhotometricInterpretation = 1, "MONOCHROME2"
    ct.PixelData = bytes(8)
    path = tmp_path / "ct.dcm"
    ct.save_as(path, enforce_file_format=True)
    send([path], server.dicomweb)
    assert read_paths(f"{server.dicomweb}/studies/{ct.StudyInstanceUID}") == NULL_LAYER
    assert "holds no mammogram, whole-slide image or result object" in shown[-1]
    assert "modality CT" in shown[-1]
