"""`medvl topk ... --out result.dcm --dicom-dir DIR`: the SR, and SR + GSPS + PM per view."""

from __future__ import annotations

import shutil

import pydicom
import pytest

from tests.engine.export.dicom.mammo_fixtures import dciodvfy_errors

hd = pytest.importorskip("highdicom")

from medvl_engine.cli.main import main  # noqa: E402
from medvl_engine.export.dicom import TOPK_DICOM_NAMES  # noqa: E402
from medvl_engine.synthetic import make_mammogram_case  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_pair")
    return make_mammogram_case(folder, seed=4, size=(384, 256), write_png=True)


def test_out_dcm_and_dicom_dir_write_the_report_and_one_object_per_view(
    pair, tiny_topk, tmp_path, capsys
):
    report, folder = tmp_path / "result.dcm", tmp_path / "dicom"
    argv = ["topk", str(pair.cc_path), str(pair.mlo_path), "--model", str(tiny_topk)]
    code = main([*argv, "--out", str(report), "--dicom-dir", str(folder), "--k", "3"])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"wrote {report}" in printed
    assert sorted(p.name for p in folder.iterdir()) == sorted(TOPK_DICOM_NAMES.values())
    sr = hd.sr.srread(report)
    assert len(sr.content.get_planar_roi_measurement_groups()) == 3
    study = pydicom.dcmread(pair.cc_path).StudyInstanceUID
    for path in [report, *folder.iterdir()]:  # dciodvfy checks these builders elsewhere
        assert pydicom.dcmread(path).StudyInstanceUID == study
    if shutil.which("dciodvfy"):
        assert dciodvfy_errors(report) == []


def test_png_views_are_refused_before_the_model_runs(pair, tiny_topk, tmp_path, capsys):
    cc, mlo = pair.png_paths["CC"], pair.png_paths["MLO"]
    code = main(
        [
            "topk",
            str(cc),
            str(mlo),
            "--model",
            str(tiny_topk),
            "--out",
            str(tmp_path / "result.dcm"),
        ]
    )
    assert code == 2
    error = capsys.readouterr().err
    assert "DICOM outputs need DICOM sources" in error
    assert list(tmp_path.iterdir()) == []


def test_the_export_dock_writes_the_layers_run_as_the_cli_report(pair, tiny_topk, tmp_path):
    from medvl_engine.errors import ExportError
    from medvl_engine.mammography import topk
    from napari_medvl._export_job import export_layer_metadata

    run = topk(pair.cc_path, pair.mlo_path, str(tiny_topk), k=3)
    metadata = {
        "medvl_kind": "topk",
        "topk_result": run.result,
        "breast": run.breast,
        "topk_run": run,
        "sources": {"CC": str(pair.cc_path), "MLO": str(pair.mlo_path)},
        "model": "tiny-topk",
    }
    path = export_layer_metadata(metadata, tmp_path / "layer.dcm")
    groups = hd.sr.srread(path).content.get_planar_roi_measurement_groups()
    assert len(groups) == 3  # one region per box of the layer's run
    without_run = {**metadata, "topk_run": None}
    with pytest.raises(ExportError, match="run TopK again") as caught:
        export_layer_metadata(without_run, tmp_path / "again.dcm")
    assert len(str(caught.value).splitlines()) == 1
    assert not (tmp_path / "again.dcm").exists()
