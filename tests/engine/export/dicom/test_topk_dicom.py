"""TopK-Patch as DICOM: SR (TID 1500), GSPS per view and Parametric Map per view.

One real run of the shipped demo model on a synthetic DICOM pair (module fixture); every
object is checked with dciodvfy, read back by pydicom and highdicom, and compared with the
result it was written from.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys

import numpy as np
import pydicom
import pytest

from tests.engine.export.dicom.mammo_fixtures import (
    ZERO_SHOT,
    dciodvfy_errors,
    image_library_entries,
    machine_folders,
    run_topk,
    text_values,
)

hd = pytest.importorskip("highdicom")

from medvl_engine.errors import ConfigError, ExportError, MissingDependencyError  # noqa: E402
from medvl_engine.export.dicom import (  # noqa: E402
    TOPK_DICOM_NAMES,
    leaked_paths,
    write_dataset,
    write_topk_dicom,
    write_topk_sr,
)

VIEWS = ("CC", "MLO")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("topk_dicom")
    case, run = run_topk(folder / "case", zero_shot=ZERO_SHOT, orientation=True)
    paths = write_topk_dicom(run, folder / "out", model_name="topksiglip-demo")
    objects = {
        key: pydicom.dcmread(folder / "out" / name) for key, name in TOPK_DICOM_NAMES.items()
    }
    sources = {"CC": pydicom.dcmread(case.cc_path), "MLO": pydicom.dcmread(case.mlo_path)}
    return case, run, paths, objects, sources, folder


def test_writes_the_sr_then_a_presentation_state_and_map_per_view(written):
    _, _, paths, objects, _, _ = written
    assert [p.name for p in paths] == list(TOPK_DICOM_NAMES.values())
    classes = {key: ds.SOPClassUID.name for key, ds in objects.items()}
    assert classes["sr"] == "Comprehensive 3D SR Storage"
    assert classes["CC_pr"] == classes["MLO_pr"] == "Grayscale Softcopy Presentation State Storage"
    assert classes["CC_pm"] == classes["MLO_pm"] == "Parametric Map Storage"


@pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)
def test_every_object_passes_dciodvfy(written):
    _, _, paths, _, _, _ = written
    assert {p.name: dciodvfy_errors(p) for p in paths} == {p.name: [] for p in paths}


def test_sr_regions_are_the_boxes_on_their_own_view(written):
    _, run, _, objects, sources, _ = written
    report = hd.sr.Comprehensive3DSR.from_dataset(objects["sr"]).content
    groups = report.get_planar_roi_measurement_groups()
    assert len(groups) == run.k
    for group in groups:
        view, rank = str(group.tracking_identifier).split(" #")
        row = list(run.result.ranks[view]).index(int(rank))
        box = run.result.boxes[view][row]
        x0, y0, x1, y1 = box
        corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]])
        assert group.roi.graphic_type.value == "POLYLINE"
        assert np.abs(np.asarray(group.roi.value) - corners).max() < 0.5
        image = group.roi.ContentSequence[0].ReferencedSOPSequence[0]
        assert image.ReferencedSOPInstanceUID == sources[view].SOPInstanceUID
        measured = {m.name.value: m.value for m in group.get_measurements()}
        assert measured["TOPK-RANK"] == int(rank)
        assert measured["TOPK-SCORE"] == pytest.approx(run.result.scores[view][row], abs=1e-6)


def test_sr_records_each_readout_and_names_the_demo_model(written):
    _, _, _, objects, _, _ = written
    report = hd.sr.Comprehensive3DSR.from_dataset(objects["sr"]).content
    groups = {str(g.tracking_identifier): g for g in report.get_image_measurement_groups()}
    assert set(groups) == {f"zero-shot {task}" for task in ZERO_SHOT}
    density = groups["zero-shot density"]
    (answer,) = density.get_qualitative_evaluations()
    assert (answer.name.value, answer.name.scheme_designator) == ("129715009", "SCT")
    assert answer.value.meaning == "Heterogeneously dense"  # C, the most probable class
    probabilities = {m.name.meaning: m.value for m in density.get_measurements()}
    assert probabilities["Probability of Heterogeneously dense"] == pytest.approx(0.6)
    cancer = {m.name.value: m.value for m in groups["zero-shot cancer"].get_measurements()}
    assert cancer["111047"] == pytest.approx(0.7)  # DCM "Probability of cancer"
    birads = groups["zero-shot birads"].get_qualitative_evaluations()[0]
    assert birads.value.value == "397144001"  # BI-RADS 4
    assert image_library_entries(objects["sr"]) == 2  # both views, with their descriptors
    texts = " ".join(text_values(objects["sr"]))
    assert "topksiglip-demo" in texts
    assert "demo model trained on synthetic data, not for diagnosis" in texts


def test_presentation_states_draw_the_boxes_and_keep_the_view_voi(written):
    case, run, _, objects, sources, _ = written
    for view in VIEWS:
        state, source = objects[f"{view}_pr"], sources[view]
        layers = {a.GraphicLayer: a for a in state.GraphicAnnotationSequence}
        boxes = layers["TOPK"]
        assert boxes.ReferencedImageSequence[0].ReferencedSOPInstanceUID == source.SOPInstanceUID
        drawn = sorted(
            np.asarray(g.GraphicData, dtype=float).reshape(-1, 2).tolist()
            for g in boxes.GraphicObjectSequence
        )
        expected = sorted(
            [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]
            for x0, y0, x1, y1 in run.result.boxes[view]
        )
        assert np.abs(np.array(drawn) - np.array(expected)).max() < 0.5
        labels = sorted(t.UnformattedTextValue for t in boxes.TextObjectSequence)
        assert labels == sorted(
            f"#{r} {s:.3f}"
            for r, s in zip(run.result.ranks[view], run.result.scores[view], strict=True)
        )
        voi = state.SoftcopyVOILUTSequence[0]
        assert float(voi.WindowCenter) == pytest.approx(float(source.WindowCenter))
        assert float(voi.WindowWidth) == pytest.approx(float(source.WindowWidth))
        assert float(state.RescaleSlope) == pytest.approx(float(source.RescaleSlope))
        assert state.PresentationLUTShape == "INVERSE"  # MONOCHROME1 keeps its polarity
        notice = layers["NOTICE"].TextObjectSequence[0].UnformattedTextValue
        assert "not for diagnosis" in notice


def test_parametric_maps_hold_the_importance_of_each_cell(written):
    _, run, _, objects, sources, _ = written
    importance = np.asarray(run.result.importance)
    bounds = np.asarray(run.result.cell_bounds, dtype=float)
    grid = importance.shape[0]
    breast = run.breast
    to_breast = breast.image.shape[0] / bounds[-1]  # model px -> breast-image px
    for view in VIEWS:
        pmap = hd.pm.ParametricMap.from_dataset(objects[f"{view}_pm"])
        values = np.asarray(pmap.get_volume().array[0], dtype=np.float32)
        assert np.array_equal(values, objects[f"{view}_pm"].pixel_array)  # pydicom agrees
        source = sources[view]
        assert values.shape == (source.Rows, source.Columns)
        mapping = objects[f"{view}_pm"].SharedFunctionalGroupsSequence[0]
        rwv = mapping.RealWorldValueMappingSequence[0]
        assert (float(rwv.RealWorldValueSlope), float(rwv.RealWorldValueIntercept)) == (1.0, 0.0)
        x0, y0, x1, y1 = breast.placements[view].crop
        checked = 0
        for row in range(grid):
            for col in range(grid):
                centre = [
                    (bounds[col] + bounds[col + 1]) / 2 * to_breast,
                    (bounds[row] + bounds[row + 1]) / 2 * to_breast,
                ]
                x, y = breast.to_source(view, [centre])[0]
                if not (x0 <= x < x1 and y0 <= y < y1):
                    continue  # the cell centre lies outside this view's breast
                assert values[int(y), int(x)] == pytest.approx(importance[row, col], rel=1e-6)
                checked += 1
        assert checked >= grid  # about half the grid lies on each view
        pixel_measures = mapping.PixelMeasuresSequence[0]
        assert [float(v) for v in pixel_measures.PixelSpacing] == [
            float(v) for v in source.PixelSpacing
        ]


def test_every_object_has_new_uids_in_the_source_study(written):
    _, _, _, objects, sources, _ = written
    source_uids = {str(ds.SOPInstanceUID) for ds in sources.values()} | {
        str(ds.SeriesInstanceUID) for ds in sources.values()
    }
    instances = [str(ds.SOPInstanceUID) for ds in objects.values()]
    assert len(set(instances)) == len(instances)
    assert not set(instances) & source_uids
    series = {str(ds.SeriesInstanceUID) for ds in objects.values()}
    assert len(series) == 3 and not series & source_uids  # SR, PR and PM series
    study = sources["CC"].StudyInstanceUID
    assert all(ds.StudyInstanceUID == study for ds in objects.values())


def test_patient_and_study_attributes_only_as_the_iods_require(written):
    _, _, _, objects, sources, _ = written
    for ds in objects.values():
        assert ds.PatientName == sources["CC"].PatientName
        assert ds.PatientID == sources["CC"].PatientID
        assert "StudyDescription" not in ds  # Type 3: the source's is not copied
        assert "BodyPartExamined" not in ds
        assert ds.StudyTime == ""  # Type 2 the source lacks: present and empty


def test_no_object_names_a_folder_of_this_machine(written):
    case, _, paths, objects, _, folder = written
    needles = machine_folders(folder, case.cc_path.parent)
    for ds in objects.values():
        assert [t for t in text_values(ds) if any(n in t for n in needles)] == []
        assert leaked_paths(ds) == []
    for path in paths:
        raw = path.read_bytes()
        assert b"/tmp" not in raw and str(folder).encode() not in raw


def test_a_dataset_naming_a_folder_is_refused(written, tmp_path):
    _, _, _, objects, _, _ = written
    planted = objects["CC_pr"].copy()
    planted.add_new("ImageComments", "LT", f"made from {tmp_path}/x.dcm")
    assert leaked_paths(planted)
    with pytest.raises(ExportError, match="names a folder of this machine"):
        write_dataset(planted, tmp_path / "planted.dcm")
    assert not (tmp_path / "planted.dcm").exists()


def test_one_sr_file_holds_every_box_under_new_uids(written, tmp_path):
    _, run, _, objects, _, _ = written
    path = write_topk_sr(run, tmp_path / "result.dcm", model_name="topksiglip-demo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.dcm"]
    again = hd.sr.srread(path)
    assert len(again.content.get_planar_roi_measurement_groups()) == run.k
    first = objects["sr"]
    assert again.SOPInstanceUID != first.SOPInstanceUID  # the same run written twice
    assert again.SeriesInstanceUID != first.SeriesInstanceUID


def test_non_dicom_views_are_refused_in_one_sentence(written, tmp_path):
    case, run, _, _, _, _ = written
    png_view = dataclasses.replace(run.cc, path=case.png_paths["CC"])
    with pytest.raises(ExportError) as caught:
        write_topk_dicom(dataclasses.replace(run, cc=png_view), tmp_path, model_name="m")
    message = str(caught.value)
    assert "DICOM outputs need DICOM sources" in message and message.count(". ") == 0
    assert list(tmp_path.iterdir()) == []


def test_an_output_never_replaces_a_source_view(written):
    case, run, _, _, _, _ = written
    before = case.cc_path.read_bytes()
    with pytest.raises(ConfigError):
        write_topk_sr(run, case.cc_path, model_name="topksiglip-demo")
    assert case.cc_path.read_bytes() == before


def test_without_highdicom_one_sentence_names_the_extra(written, tmp_path, monkeypatch):
    _, run, _, _, _, _ = written
    monkeypatch.setitem(sys.modules, "highdicom", None)  # import highdicom -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'napari-medvl\[dicom\]'"):
        write_topk_dicom(run, tmp_path, model_name="topksiglip-demo")


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("dciodvfy") is None, reason="dciodvfy (dicom3tools) is not installed"
)
def test_real_readouts_of_the_demo_model_make_a_valid_report(tmp_path):
    """The whole path with the text encoder: the model's own zero-shot readouts."""
    _, run = run_topk(tmp_path / "case", seed=5, photometric="MONOCHROME2")
    paths = write_topk_dicom(run, tmp_path / "out", model_name="topksiglip-demo")
    assert {p.name: dciodvfy_errors(p) for p in paths} == {p.name: [] for p in paths}
    report = hd.sr.srread(paths[0]).content
    groups = {str(g.tracking_identifier): g for g in report.get_image_measurement_groups()}
    assert set(groups) == {f"zero-shot {task}" for task in run.zero_shot}
    for task, probabilities in run.zero_shot.items():
        written_values = sorted(m.value for m in groups[f"zero-shot {task}"].get_measurements())
        assert written_values == pytest.approx(sorted(probabilities.values()), abs=1e-6)
    state = pydicom.dcmread(paths[1])
    assert state.PresentationLUTShape == "IDENTITY"  # MONOCHROME2 source
    assert image_library_entries(pydicom.dcmread(paths[0])) == 0  # no Patient Orientation
