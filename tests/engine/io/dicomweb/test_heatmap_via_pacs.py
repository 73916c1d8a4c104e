"""`medvl heatmap dicomweb://.../series/UID --out map.dcm --send URL` against a real Orthanc:
the slide is read from the server, the map and top patches go back to it, and what the server
gives back holds the same scores as the same command run on the local files."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest

from medvl_engine.cli.main import main
from tests.engine.io.dicomweb.conftest import digest

pytest.importorskip("highdicom")


@pytest.mark.slow
def test_a_heatmap_of_a_slide_on_the_server_goes_back_with_the_local_scores(
    orthanc, tmp_path, demo_encoder, capsys
):
    from medvl_engine.io.dicom_results import read_dicom_result
    from medvl_engine.io.dicomweb import remote_contents
    from tests.support.dicom_wsi import write_dicom_wsi

    demo_encoder()  # the demo model is fitted once, in the process' own cache
    orthanc.clear()
    rgb = np.full((512, 640, 3), 235, np.uint8)
    rgb[96:416, 128:512] = (150, 60, 140)  # a stained block on white glass
    rgb[200:300, 250:400] = (90, 30, 110)
    files = write_dicom_wsi(tmp_path / "wsi", rgb, mpp=0.5, tile=128)
    assert main(["send", *map(str, files), "--to", orthanc.dicomweb]) == 0
    header = pydicom.dcmread(files[0], stop_before_pixels=True)
    study = f"{orthanc.dicomweb}/studies/{header.StudyInstanceUID}"
    url = f"{study}/series/{header.SeriesInstanceUID}"

    local = tmp_path / "local.npz"
    assert main(["heatmap", str(files[0]), "--prompt", "tumor", "--out", str(local)]) == 0
    out, remote = tmp_path / "out" / "map.dcm", tmp_path / "out" / "map.npz"
    out.parent.mkdir()
    argv = ["heatmap", url, "--prompt", "tumor", "--top", "3", "--out", str(out)]
    assert main([*argv, "--out", str(remote), "--send", orthanc.dicomweb]) == 0
    assert "sent 2 file(s)" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(remote)["scores"], np.load(local)["scores"], atol=1e-6)

    contents = remote_contents(study, timeout=10)
    assert len(contents.slides) == 1 and not contents.mammograms
    by_kind = {read_dicom_result(path).kind: path for path in contents.results}
    assert sorted(by_kind) == ["ANN", "PM"]
    assert digest(by_kind["PM"]) == digest(out)  # the server gives back what was written
    (image,) = read_dicom_result(by_kind["PM"], source=files[0]).images
    scores = np.load(local)["scores"]
    assert np.isfinite(image.values).sum() == np.isfinite(scores).sum()
    assert np.nanmax(image.values) == pytest.approx(float(np.nanmax(scores)), abs=1e-6)
    assert np.nanmin(image.values) == pytest.approx(float(np.nanmin(scores)), abs=1e-6)
    annotations = pydicom.dcmread(by_kind["ANN"])
    assert annotations.StudyInstanceUID == header.StudyInstanceUID
    assert annotations.AnnotationGroupSequence[0].NumberOfAnnotations == 3


@pytest.mark.slow
def test_a_heatmap_of_a_study_that_is_not_there_is_one_sentence(orthanc, tmp_path, capsys):
    orthanc.clear()
    url = f"{orthanc.dicomweb}/studies/1.2.3.4/series/1.2.3.5"
    argv = ["heatmap", url, "--prompt", "tumor", "--out", str(tmp_path / "map.dcm")]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert "has no series at" in error and "check the UIDs" in error
    assert "Traceback" not in error and len(error.splitlines()) == 1
    assert not (tmp_path / "map.dcm").exists()
