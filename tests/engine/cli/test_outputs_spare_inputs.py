"""An output never replaces an input: heatmap, export, features, embed-manifest and the
engine's guard itself (symlinks, hard links, folders, DICOM series folders)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from medvl_engine.cli.main import main
from medvl_engine.errors import ConfigError
from medvl_engine.export.input_guard import (
    check_output_folder_spares_inputs,
    check_outputs_spare_inputs,
    dependent_outputs,
)


@pytest.fixture
def slide(tmp_path, write_pyramid_tiff, coordinate_image):
    return write_pyramid_tiff(tmp_path / "X.tiff", [coordinate_image(512, 512)])


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("medvl: error: "), err
    return err[0]


def test_heatmap_refuses_to_write_over_its_slide_before_any_model_loads(slide, capsys):
    before = slide.read_bytes()
    argv = ["heatmap", str(slide), "--prompt", "tumor", "--model", "no-such-model"]
    assert main([*argv, "--out", str(slide)]) == 2
    line = _one_error_line(capsys)
    assert "is the input X.tiff" in line and "destroy the input" in line
    assert slide.read_bytes() == before


@pytest.mark.parametrize("link", ["symlink", "hardlink", "dotdot"])
def test_heatmap_sees_through_links_and_relative_paths(slide, tmp_path, capsys, link):
    other = tmp_path / "elsewhere"
    other.mkdir()
    if link == "symlink":
        out = other / "map.tiff"
        out.symlink_to(slide)
    elif link == "hardlink":
        out = other / "map.tiff"
        os.link(slide, out)
    else:
        out = other / ".." / "X.tiff"
    before = slide.read_bytes()
    assert main(["heatmap", str(slide), "--prompt", "t", "--out", str(out)]) == 2
    assert "destroy the input" in _one_error_line(capsys)
    assert slide.read_bytes() == before


def test_heatmap_refuses_outputs_inside_its_feature_store_and_twice_named(slide, tmp_path, capsys):
    store = tmp_path / "X.zarr"
    store.mkdir()
    argv = ["heatmap", str(slide), "--prompt", "t", "--features", str(store)]
    assert main([*argv, "--out", str(store / "map.png")]) == 2
    assert "inside the input folder X.zarr" in _one_error_line(capsys)
    out = tmp_path / "map.png"
    assert main(["heatmap", str(slide), "--prompt", "t", "--out", str(out), "--out", str(out)]) == 2
    assert "named twice as an output" in _one_error_line(capsys)
    assert not out.exists()


def test_export_refuses_to_replace_the_saved_heatmap(tmp_path, capsys):
    saved = tmp_path / "h.npz"
    np.savez(saved, scores=np.zeros(2))
    before = saved.read_bytes()
    assert main(["export", str(saved), "--out", str(saved)]) == 2
    assert "is the input h.npz" in _one_error_line(capsys)
    assert saved.read_bytes() == before


def test_features_refuses_a_file_or_an_input_folder_as_its_output_folder(slide, tmp_path, capsys):
    existing = tmp_path / "notes.txt"
    existing.write_text("keep me")
    assert main(["features", str(slide), "--out", str(existing)]) == 2
    assert "is an existing file, not a folder" in _one_error_line(capsys)
    assert existing.read_text() == "keep me"
    series = tmp_path / "dicom-series"
    series.mkdir()
    assert main(["features", str(series), "--out", str(series / "stores")]) == 2
    assert "inside the input dicom-series" in _one_error_line(capsys)
    assert not (series / "stores").exists()


def test_embed_manifest_refuses_to_replace_its_metadata_table(tmp_path, capsys):
    metadata = tmp_path / "meta.csv"
    metadata.write_text("a,b\n")
    clinical = tmp_path / "clinical.csv"
    clinical.write_text("c,d\n")
    argv = ["embed-manifest", "--metadata", str(metadata), "--clinical", str(clinical)]
    assert main([*argv, "--image-root", str(tmp_path), "--out", str(clinical)]) == 2
    assert "is the input clinical.csv" in _one_error_line(capsys)
    assert clinical.read_text() == "c,d\n"


def test_dicom_outputs_may_not_join_an_input_series_but_other_files_may_sit_beside_it(tmp_path):
    source = tmp_path / "level0"  # a DICOM file without a suffix, told by its preamble
    source.write_bytes(b"\0" * 128 + b"DICM" + b"\0" * 16)
    with pytest.raises(ConfigError, match="beside the DICOM input level0"):
        check_outputs_spare_inputs([tmp_path / "result.dcm"], [source])
    check_outputs_spare_inputs([tmp_path / "result.png", tmp_path / "boxes.csv"], [source])
    check_outputs_spare_inputs([tmp_path / "sub" / "result.dcm"], [source])


def test_guard_accepts_distinct_outputs_and_skips_missing_inputs(tmp_path):
    check_outputs_spare_inputs([tmp_path / "a.png", tmp_path / "b.png"], [None, tmp_path / "x"])
    check_output_folder_spares_inputs(tmp_path / "new-folder", [tmp_path / "x.tiff", None])
    assert dependent_outputs(tmp_path / "t.csv") == [
        tmp_path / "t.csv",
        tmp_path / "t_importance.npy",
    ]
    assert dependent_outputs(tmp_path / "t.png") == [tmp_path / "t.png"]
