"""What a reader decided in the user's stead (an impossible mpp read as unknown) is said by the
commands that compute on the slide, not only by `medvl info`."""

from __future__ import annotations

import numpy as np
import tifffile

from medvl_engine.cli.main import main


def _slide_with_impossible_mpp(path):
    metadata = {"axes": "YXS", "PhysicalSizeX": 1e-300, "PhysicalSizeY": 1e-300}
    tifffile.imwrite(path, np.zeros((64, 64, 3), np.uint8), ome=True, metadata=metadata)
    return path


def test_heatmap_and_features_say_the_mpp_was_treated_as_unknown(tmp_path, capsys):
    slide = _slide_with_impossible_mpp(tmp_path / "tiny.ome.tif")
    argv = ["heatmap", str(slide), "--prompt", "t", "--model", "no-such-model"]
    assert main([*argv, "--out", str(tmp_path / "h.png")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("medvl: note: tiny.ome.tif: the stated pixel size 1e-300")
    assert "treated as unknown" in err[0] and err[1].startswith("medvl: error: ")
    argv = ["features", str(slide), "--encoder", "no-such-model", "--out", str(tmp_path / "f")]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("medvl: note: tiny.ome.tif: the stated pixel size 1e-300")


def test_a_slide_with_its_mpp_prints_no_note(
    tmp_path, capsys, write_pyramid_tiff, coordinate_image
):
    slide = write_pyramid_tiff(tmp_path / "ok.tiff", [coordinate_image(256, 256)])
    argv = ["heatmap", str(slide), "--prompt", "t", "--model", "no-such-model"]
    assert main([*argv, "--out", str(tmp_path / "h.png")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("medvl: error: ")
