"""Atomic writes of files and folders: complete result or the old one, never a partial one."""

from __future__ import annotations

import json

import pytest

from medvl_engine import atomic_directory, atomic_write, atomic_write_stream
from medvl_engine.errors import ExportError


def test_atomic_write_replaces_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old")
    atomic_write(target, lambda temporary: temporary.write_text("new"))
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_failed_write_keeps_old_file_and_removes_temporary(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old")

    def fail(temporary):
        temporary.write_text("half")
        raise RuntimeError("writer crashed")

    with pytest.raises(RuntimeError, match="writer crashed"):
        atomic_write(target, fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_missing_folder_names_what_and_where(tmp_path):
    target = tmp_path / "missing" / "run.pt"
    with pytest.raises(ExportError, match=r"could not write checkpoint .*run\.pt: folder"):
        atomic_write_stream(
            target, lambda handle: handle.write(b"x"), binary=True, what="checkpoint"
        )


def test_stream_writer_text_and_binary(tmp_path):
    text = atomic_write_stream(tmp_path / "a.json", lambda h: json.dump({"k": "é"}, h))
    raw = atomic_write_stream(tmp_path / "b.bin", lambda h: h.write(b"\x00\x01"), binary=True)
    assert json.loads(text.read_text(encoding="utf-8")) == {"k": "é"}
    assert raw.read_bytes() == b"\x00\x01"


def test_atomic_directory_replaces_existing_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "stale.bin").write_text("old")
    atomic_directory(folder, lambda staging: (staging / "config.json").write_text("{}"))
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_atomic_directory_failure_keeps_old_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("old")

    def fail(staging):
        (staging / "config.json").write_text("half")
        raise RuntimeError("save failed")

    with pytest.raises(RuntimeError, match="save failed"):
        atomic_directory(folder, fail)
    assert (folder / "config.json").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_atomic_directory_keeps_a_complete_folder_built_meanwhile(tmp_path):
    folder = tmp_path / "cache"

    def fill(staging):
        (staging / "info.json").write_text("mine")
        folder.mkdir()  # another process finishes the same folder first
        (folder / "info.json").write_text("theirs")

    atomic_directory(folder, fill, keep_if_present="info.json")
    assert (folder / "info.json").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]


def test_atomic_directory_incomplete_rival_is_an_error(tmp_path):
    folder = tmp_path / "cache"

    def fill(staging):
        (staging / "info.json").write_text("mine")
        folder.mkdir()
        (folder / "partial.tif").write_text("?")

    with pytest.raises(ExportError, match=r"could not write sample data folder .*cache"):
        atomic_directory(folder, fill, what="sample data folder", keep_if_present="info.json")
