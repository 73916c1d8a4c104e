"""A quiet and private `medvl`: one sentence on stderr on failure, whatever the libraries say;
progress lines ended before it; undecodable names shown, not blamed; no identifying fields
from `medvl info` unless asked for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medvl_engine.cli.main import main

MEDVL = Path(sys.executable).with_name("medvl")
BAD_SAMPLES = ["bad/unreadable.svs", "bad/unopenable.tiff", "bad/broken.svs"]


def _medvl(*args: str | bytes) -> subprocess.CompletedProcess:
    if not MEDVL.exists():
        pytest.skip(f"the medvl command is not installed beside {sys.executable}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([MEDVL, *args], capture_output=True, env=env, timeout=120)


def _noisy_tiff(path: Path) -> Path:
    """A TIFF header whose first page lies beyond the end of the file (tifffile logs it)."""
    path.write_bytes(b"II*\x00" + (1_275_950).to_bytes(4, "little") + b"\x00" * 200)
    return path


def _one_error_line(err: str, name: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"medvl: error: {name}: "), err
    return lines[0]


def test_the_crafted_file_makes_tifffile_talk_under_verbose(tmp_path):
    completed = _medvl("--verbose", "info", str(_noisy_tiff(tmp_path / "noisy.svs")))
    err = completed.stderr.decode()
    assert completed.returncode == 2
    assert "invalid offset to first page" in err  # tifffile's log line
    assert "medvl: reason: " in err  # what lies under our sentence


def test_only_our_sentence_on_stderr_for_a_file_that_makes_tifffile_log(
    tmp_path, capfd, caplog, write_pyramid_tiff, pyramid, coordinate_image
):
    good = write_pyramid_tiff(tmp_path / "good.tiff", pyramid(coordinate_image(256, 256), 2))
    noisy = _noisy_tiff(tmp_path / "noisy.svs")
    completed = _medvl("info", str(good), str(noisy))
    assert completed.returncode == 2 and b"dimensions: [256, 256]" in completed.stdout
    _one_error_line(completed.stderr.decode(), "noisy.svs")
    assert main(["info", str(noisy)]) == 2
    _one_error_line(capfd.readouterr().err, "noisy.svs")
    # in-process, pytest's own log capture would have received tifffile's records
    assert [r for r in caplog.records if r.name.startswith("tifffile")] == []


@pytest.mark.parametrize("verbose", [False, True])
def test_library_logs_and_warnings_are_held_back_for_a_command(verbose, caplog, recwarn):
    import logging
    import warnings

    from medvl_engine.common.console import command_session

    with command_session(verbose=verbose):
        for name in ("tifffile", "tiffslide", "pydicom", "zarr", "PIL.TiffImagePlugin"):
            logging.getLogger(name).warning("%s talks", name)
        warnings.warn_explicit("odd value", UserWarning, "valuerep.py", 1, "pydicom.valuerep")
        warnings.warn_explicit("big image", UserWarning, "Image.py", 1, "PIL.Image")
        warnings.warn_explicit("our own", UserWarning, "heatmap.py", 1, "medvl_engine.heatmap")
    logged = sorted(r.name for r in caplog.records)
    warned = sorted(str(w.message) for w in recwarn if w.category is UserWarning)
    if verbose:
        assert logged == ["PIL.TiffImagePlugin", "pydicom", "tifffile", "tiffslide", "zarr"]
        assert warned == ["big image", "odd value", "our own"]
    else:
        assert logged == [] and warned == ["our own"]
    logging.getLogger("tifffile").warning("after the command")  # levels are put back
    assert caplog.records[-1].getMessage() == "after the command"


def test_only_our_sentence_on_stderr_for_the_broken_samples(sample_data, capfd, run_in_background):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    children = {  # the commands run while the same files go through main() here
        relative: run_in_background(
            [MEDVL, "info", str(sample_data / relative)], capture_output=True, env=env, timeout=120
        )
        for relative in BAD_SAMPLES
        if MEDVL.exists()
    }
    for relative in BAD_SAMPLES:
        path = sample_data / relative
        assert main(["info", str(path)]) == 2
        _one_error_line(capfd.readouterr().err, path.name)
        completed = children[relative].result() if children else _medvl("info", str(path))
        assert completed.returncode == 2 and completed.stdout == b""
        _one_error_line(completed.stderr.decode(), path.name)


def test_debug_still_raises_with_the_traceback(tmp_path):
    from medvl_engine.errors import CorruptFileError

    with pytest.raises(CorruptFileError, match="noisy.svs"):
        main(["--debug", "info", str(_noisy_tiff(tmp_path / "noisy.svs"))])


def test_a_multi_line_decoder_reason_is_folded_not_cut(tmp_path, capfd, write_dicom):
    from pydicom.uid import JPEG2000Lossless

    path = write_dicom(
        tmp_path / "j2k.dcm", np.zeros((8, 8), np.uint16), transfer_syntax=JPEG2000Lossless
    )
    assert main(["info", str(path)]) == 2
    line = _one_error_line(capfd.readouterr().err, "j2k.dcm")
    # pydicom lists each plugin's reason on its own line after "...all available plugins:"
    assert "could not be decoded (" in line and "plugins:)" not in line
    reason = line.split("could not be decoded (", 1)[1]
    assert reason.count(":") >= 2, line  # the plugin lines are there, not only the heading


@pytest.fixture()
def non_utf8_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "names"
    folder.mkdir()
    try:
        (folder / os.fsdecode(b"probe\xff")).write_bytes(b"")
    except (OSError, UnicodeError):
        pytest.skip("this file system does not take file names that are not UTF-8")
    return folder


def test_a_file_name_that_is_not_utf8_is_shown_and_not_blamed(
    non_utf8_folder, capfd, write_pyramid_tiff, pyramid, coordinate_image
):
    slide = write_pyramid_tiff(
        non_utf8_folder / os.fsdecode(b"sl\xffide.tiff"), pyramid(coordinate_image(256, 256), 2)
    )
    assert main(["info", str(slide)]) == 0
    captured = capfd.readouterr()
    assert captured.err == ""
    assert "sl\\xffide.tiff" in captured.out and "dimensions: [256, 256]" in captured.out

    broken = non_utf8_folder / os.fsdecode(b"br\xe9ken.svs")
    shutil.copyfile(_noisy_tiff(non_utf8_folder / "plain.svs"), broken)
    completed = _medvl("info", os.fsencode(broken))
    assert completed.returncode == 2
    line = _one_error_line(completed.stderr.decode(), "br\\xe9ken.svs")
    assert "utf-8" not in line.lower() and "surrogate" not in line


def test_a_heatmap_of_a_slide_whose_name_is_not_utf8(
    non_utf8_folder, tmp_path, capfd, demo_encoder
):
    from medvl_engine.synthetic import make_synthetic_slide

    demo_encoder()
    made = make_synthetic_slide(
        tmp_path / "plain.tiff", seed=3, size=(1024, 1024), classes=("tumor", "stroma")
    ).path
    slide = non_utf8_folder / os.fsdecode(b"sl\xffide.tiff")
    os.replace(made, slide)
    out = tmp_path / "h.npz"
    assert main(["heatmap", str(slide), "--prompt", "tumor", "--out", str(out)]) == 0
    with np.load(out) as data:
        assert len(data["scores"]) > 0
    assert "error" not in capfd.readouterr().err


def test_a_heatmap_error_starts_on_its_own_line_after_the_progress_line(
    tmp_path, capfd, demo_encoder
):
    import tifffile

    from medvl_engine.synthetic import make_synthetic_slide

    demo_encoder()
    path = make_synthetic_slide(
        tmp_path / "spoiled.tiff", seed=3, size=(2048, 2048), classes=("tumor", "stroma")
    ).path
    with tifffile.TiffFile(path) as tif:
        tiles = list(zip(tif.pages[0].dataoffsets, tif.pages[0].databytecounts, strict=True))
    data = bytearray(Path(path).read_bytes())
    for offset, count in tiles[len(tiles) // 2 :]:  # level 0 decodes only halfway
        data[offset : offset + count] = b"\xff\x00" * (count // 2) + b"\xff" * (count % 2)
    Path(path).write_bytes(bytes(data))

    status = main(["heatmap", str(path), "--prompt", "tumor", "--out", str(tmp_path / "h.png")])
    err = capfd.readouterr().err
    assert status == 2
    progress, error = err.rstrip("\n").rsplit("\n", 1)
    assert "features: " in progress and "patches" in progress
    assert error.startswith("medvl: error: spoiled.tiff: ") and "\r" not in error
    assert not (tmp_path / "h.png").exists()


IDENTIFYING_CMU = {
    "aperio.Date": "12/29/09",
    "aperio.Time": "09:59:15",
    "aperio.ScanScope ID": "CPAPERIOCS",
    "aperio.ImageID": "1004486",
}


def test_info_withholds_scan_date_time_and_ids_unless_asked(sample_file, capfd):
    path = str(sample_file("slides/CMU-1-Small-Region.svs"))
    for argv in (["info", "--json", path], ["info", path]):
        assert main(argv) == 0
        out = capfd.readouterr().out
        for key, value in IDENTIFYING_CMU.items():
            assert key not in out and value not in out
    assert main(["info", "--json", path]) == 0
    (info,) = json.loads(capfd.readouterr().out)
    assert info["properties"]["aperio.AppMag"] == 20 and info["mpp"] == [0.499, 0.499]
    assert info["withheld_fields"] >= len(IDENTIFYING_CMU)

    for flag in ("--identifying", "--show-phi"):
        assert main(["info", "--json", flag, path]) == 0
        (info,) = json.loads(capfd.readouterr().out)
        for key, value in IDENTIFYING_CMU.items():
            assert str(info["properties"][key]) == value
        assert "withheld_fields" not in info


def test_info_withholds_dicom_uids_and_dated_versions_unless_asked(sample_file, capfd):
    path = str(sample_file("dicom/boxes_0.dcm"))
    uid = "1.3.6.1.4.1.5962.99.1.1747645553.419656796.1689669825649.4.0"
    assert main(["info", "--json", path]) == 0
    out = capfd.readouterr().out
    assert uid not in out and "SLIDE_1" not in out and "Oct  4 18:39:42" not in out
    (info,) = json.loads(out)
    assert info["properties"]["dicom.TransferSyntaxUID"] == "1.2.840.10008.1.2.4.50"
    assert info["properties"]["dicom.Manufacturer"] == "Leica Biosystems"
    assert main(["info", "--json", "--identifying", path]) == 0
    (info,) = json.loads(capfd.readouterr().out)
    assert info["properties"]["dicom.SeriesInstanceUID"] == uid
    assert info["patient_data"]["dicom.ContainerIdentifier"] == "SLIDE_1"


def test_info_on_a_mammogram_shows_technical_fields_only(tmp_path, capfd, write_dicom):
    path = write_dicom(
        tmp_path / "R_CC.dcm",
        np.zeros((8, 8), np.uint16),
        Manufacturer="ACME",
        InstitutionName="St Elsewhere",
        StudyDate="20240131",
        DeviceSerialNumber="SN-778",
    )
    assert main(["info", "--json", str(path)]) == 0
    out = capfd.readouterr().out
    for secret in ("St Elsewhere", "20240131", "SN-778", "Doe^Jane", "PID-0042", "19600101"):
        assert secret not in out
    (info,) = json.loads(out)
    assert info["properties"]["manufacturer"] == "ACME"
    assert main(["info", "--identifying", str(path)]) == 0
    shown = capfd.readouterr().out
    assert "PatientName: Doe^Jane" in shown and "InstitutionName: St Elsewhere" in shown


def test_privacy_rules_on_keys_and_values():
    from medvl_engine.common.privacy import split_identifying

    shown, withheld = split_identifying(
        {
            "tiffslide.mpp-x": 0.25,
            "aperio.AppMag": 40,
            "aperio.ScanScope ID": "SS1234",
            "aperio.Exposure Time": 32,
            "vendor.SomethingNew": "?",
            "dicom.SeriesInstanceUID": "1.2.3",
            "dicom.TransferSyntaxUID": "1.2.840.10008.1.2.1",
            "dicom.SoftwareVersions": "v1 built 2022-10-04",
            "tiff.Software": "scanner 3.1",
        }
    )
    assert list(shown) == [
        "tiffslide.mpp-x",
        "aperio.AppMag",
        "dicom.TransferSyntaxUID",
        "tiff.Software",
    ]
    assert set(withheld) == {
        "aperio.ScanScope ID",
        "aperio.Exposure Time",
        "vendor.SomethingNew",
        "dicom.SeriesInstanceUID",
        "dicom.SoftwareVersions",
    }
