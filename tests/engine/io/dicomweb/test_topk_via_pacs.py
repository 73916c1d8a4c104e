"""From the PACS and back: TopK on a study read from Orthanc, its DICOM results (SR, GSPS,
Parametric Maps) sent back with `medvl send`, then the SR retrieved from the server and read
back as the same boxes on the same views."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pydicom
import pytest

from medvl_engine.cli.main import main

pytest.importorskip("highdicom")


@pytest.mark.slow  # about 30 s on 2 busy cores: the demo TopK model runs once
def test_topk_from_the_server_and_its_sr_back_through_the_server(
    server, tmp_path, monkeypatch, capsys
):
    from medvl_engine.export.dicom import write_topk_dicom
    from medvl_engine.io.dicom_results import read_dicom_result
    from medvl_engine.io.dicomweb import fetch, resolve_mammo_study
    from medvl_engine.mammography import topk
    from medvl_engine.synthetic import make_mammogram_case

    case = make_mammogram_case(tmp_path / "exam", seed=3, size=(512, 320), exam_id="pacs1")
    assert main(["send", str(case.cc_path), str(case.mlo_path), "--to", server.dicomweb]) == 0
    study_uid = str(pydicom.dcmread(case.cc_path, stop_before_pixels=True).StudyInstanceUID)
    study = f"{server.dicomweb}/studies/{study_uid}"

    ((cc, mlo),) = resolve_mammo_study(study)
    run = topk(cc, mlo, "topksiglip-demo", zero_shot=False)
    written = write_topk_dicom(run, tmp_path / "results", model_name="topksiglip-demo")
    capsys.readouterr()
    assert main(["send", *map(str, written), "--to", study]) == 0
    assert f"sent {len(written)} file(s)" in capsys.readouterr().out

    assert main(["info", "--json", study]) == 0
    (listing,) = json.loads(capsys.readouterr().out)
    counts = sorted((series["modality"], series["instances"]) for series in listing["series"])
    # the two views, then one series each of maps (OT), presentation states and the report
    assert counts == [("MG", 1), ("MG", 1), ("OT", 2), ("PR", 2), ("SR", 1)]
    (sr_series,) = [s["series"] for s in listing["series"] if s["modality"] == "SR"]

    assert main(["info", sr_series]) == 0
    assert "DICOM structured report (SR)" in capsys.readouterr().out

    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "second-cache"))  # nothing cached
    (sr_path,) = fetch(sr_series)
    assert hashlib.sha256(sr_path.read_bytes()).digest() == (
        hashlib.sha256(written[0].read_bytes()).digest()
    )
    result = read_dicom_result(sr_path)
    assert result.kind == "SR"
    uids = {
        view: str(pydicom.dcmread(path, stop_before_pixels=True).SOPInstanceUID)
        for view, path in (("CC", cc), ("MLO", mlo))
    }
    for view, uid in uids.items():
        shapes = [s for group in result.shapes if group.source_uid == uid for s in group.shapes]
        boxes = sorted(
            (float(s[:, 0].min()), float(s[:, 1].min()), float(s[:, 0].max()), float(s[:, 1].max()))
            for s in shapes
        )
        expected = sorted(tuple(map(float, box)) for box in run.result.boxes[view])
        assert len(boxes) == len(expected) == len(run.result.ranks[view])
        np.testing.assert_allclose(boxes, expected, atol=1e-3)


@pytest.mark.slow  # the demo TopK model runs once
def test_medvl_topk_reads_a_study_and_sends_its_results_back(server, tmp_path, capsys):
    from medvl_engine.io.dicom_results import read_dicom_result
    from medvl_engine.io.dicomweb import fetch, search_series
    from medvl_engine.io.dicomweb import parse_reference as ref
    from medvl_engine.synthetic import make_mammogram_case

    for seed, side in ((4, "L"), (5, "R")):
        make_mammogram_case(
            tmp_path / "exam", seed=seed, laterality=side, size=(512, 320), exam_id="pacs2"
        )
    views = sorted((tmp_path / "exam").glob("*.dcm"))
    assert main(["send", *map(str, views), "--to", server.dicomweb]) == 0
    study_uid = str(pydicom.dcmread(views[0], stop_before_pixels=True).StudyInstanceUID)
    study = f"{server.dicomweb}/studies/{study_uid}"
    out = tmp_path / "results"
    csv = tmp_path / "boxes.csv"
    capsys.readouterr()
    argv = ["topk", study, "--breast", "L", "--dicom-dir", str(out), "--out", str(csv)]
    assert main([*argv, "--send", study]) == 0
    printed = capsys.readouterr().out
    assert "sent 5 file(s) to 127.0.0.1:" in printed  # SR, 2 GSPS, 2 maps; not the CSV
    assert csv.is_file() and len(list(out.glob("*.dcm"))) == 5  # written locally as well

    sr_series = [s for s in search_series(ref(study), timeout=10) if s.modality == "SR"]
    (sr_path,) = fetch(ref(study).at(study_uid, sr_series[0].uid))
    result = read_dicom_result(sr_path)
    left = {
        str(pydicom.dcmread(p, stop_before_pixels=True).SOPInstanceUID)
        for p in views
        if "_L_" in p.name
    }
    assert set(result.source_uids) == left  # the report is on the left breast's two views
    assert sum(len(group) for group in result.shapes) == sum(
        1 for line in csv.read_text().splitlines()[1:] if line.strip()
    )

    # the server goes away: the results are still written, the error says so, exit 2
    again = tmp_path / "again"
    down = f"dicomweb://127.0.0.1:{_closed_port()}/dicom-web"
    argv = ["topk", study, "--breast", "L", "--dicom-dir", str(again), "--send", down]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "connection refused" in err[0] and "kept unchanged" in err[0]
    assert len(list(again.glob("*.dcm"))) == 5


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
