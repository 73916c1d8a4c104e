"""`medvl info`: kinds, text and JSON output, errors on stderr, patient data only on request."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from medvl_engine.cli.main import main


def test_info_on_every_sample_file(sample_data, capsys):
    good = [
        "slides/CMU-1-Small-Region.svs",
        "slides/small.svs",
        "slides/boxes.tiff",
        "slides/test3-DAPI-2.ndpi",
        "dicom/sm_image.dcm",
        "dicom/boxes_0.dcm",
        "dicom/dx_image.dcm",
        "dicom/MG1_J2KI.dcm",
    ]
    bad = ["bad/unreadable.svs", "bad/unopenable.tiff", "bad/broken.svs"]
    paths = [str(sample_data / name) for name in bad[:1] + good + bad[1:]]
    status = main(["info", "--json", *paths])
    captured = capsys.readouterr()
    assert status == 2
    described = {
        entry["path"].split("sample-data/")[1]: entry for entry in json.loads(captured.out)
    }
    assert sorted(described) == sorted(good)
    assert described["dicom/MG1_J2KI.dcm"]["kind"] == "mammogram"  # modality RG
    assert described["dicom/MG1_J2KI.dcm"]["view"] == "MLO"
    assert described["dicom/dx_image.dcm"]["kind"] == "mammogram"
    assert described["dicom/sm_image.dcm"]["kind"] == "slide"
    assert described["slides/test3-DAPI-2.ndpi"]["mpp"][0] == 0.2281750559028887
    assert [lvl["dimensions"] for lvl in described["slides/boxes.tiff"]["levels"]][-1] == [37, 31]
    errors = captured.err.strip().splitlines()
    assert len(errors) == 3 and "Traceback" not in captured.err
    for line, name in zip(errors, ["unreadable.svs", "unopenable.tiff", "broken.svs"], strict=True):
        assert line.startswith(f"medvl: error: {name}: ")
    for secret in (
        "Dog^AVeryGood",
        "123456",
        "Test^Patient",
        "AA01",
        "CompressedSamples",
        "b414003d",
    ):
        assert secret not in captured.out


def test_patient_data_only_with_show_phi(tmp_path, capsys, write_dicom):
    path = write_dicom(tmp_path / "x.dcm", np.zeros((8, 8), np.uint16), AccessionNumber="ACC-9")
    assert main(["info", str(path)]) == 0
    hidden = capsys.readouterr().out
    assert "Doe^Jane" not in hidden and "PID-0042" not in hidden and "ACC-9" not in hidden
    assert "kind: mammogram" in hidden
    assert main(["info", "--show-phi", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "PatientName: Doe^Jane" in shown and "AccessionNumber: ACC-9" in shown


def test_auto_kind_by_colour_and_forced_kind(
    tmp_path, capsys, write_pyramid_tiff, pyramid, coordinate_image
):
    Image.fromarray(np.full((64, 48), 100, np.uint8)).save(tmp_path / "gray_R_CC.png")
    Image.fromarray(coordinate_image(64, 48)).save(tmp_path / "colour.png")
    tiff = write_pyramid_tiff(tmp_path / "p.tif", pyramid(coordinate_image(300, 300), 2))
    paths = [str(tmp_path / "gray_R_CC.png"), str(tmp_path / "colour.png"), str(tiff)]
    assert main(["info", "--json", *paths]) == 0
    kinds = [entry["kind"] for entry in json.loads(capsys.readouterr().out)]
    assert kinds == ["mammogram", "slide", "slide"]
    assert main(["info", "--json", "--kind", "slide", str(tmp_path / "gray_R_CC.png")]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["kind"] == "slide" and entry["dimensions"] == [48, 64]


def test_missing_and_unknown_dicom_modality(tmp_path, capsys, write_dicom):
    ct = write_dicom(tmp_path / "ct.dcm", np.zeros((8, 8), np.uint16), Modality="CT")
    status = main(["info", str(tmp_path / "absent.svs"), str(ct)])
    err = capsys.readouterr().err
    assert status == 2
    assert "absent.svs: no such file" in err
    assert "ct.dcm: DICOM modality CT is neither a slide (SM) nor a mammogram" in err
