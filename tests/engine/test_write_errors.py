"""The sentences for writes the machine refuses (medvl_engine.common.write_errors)."""

from __future__ import annotations

import errno
import os

import pytest

from medvl_engine.common.atomic import atomic_directory
from medvl_engine.common.write_errors import (
    make_output_folder,
    os_error_in,
    reporting_write_errors,
    write_error,
)
from medvl_engine.errors import ExportError, MedVLError, StorageError
from tests.support.write_faults import failing_writes


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ENOSPC, "the disk holding {f} is full (No space left on device); free space there"),
        (errno.EDQUOT, "your disk quota on the disk holding {f} is used up (Disk quota exceeded)"),
        (errno.EFBIG, "the file grew larger than the file system of {f} or this process's file"),
        (errno.EROFS, "{f} is on a read-only file system (Read-only file system); choose a"),
        (errno.EACCES, "{f} is read-only for this user (Permission denied); choose a folder you"),
        (errno.EPERM, "{f} is read-only for this user (Operation not permitted); choose a"),
        (errno.EIO, "the disk holding {f} reported an input/output error (Input/output error)"),
        (errno.EMFILE, "Too many open files; check that the folder is writable and has free"),
    ],
)
def test_each_refusal_is_one_sentence_naming_the_file_and_the_folder(tmp_path, code, words):
    target = tmp_path / "out.csv"
    error = write_error("table", target, OSError(code, os.strerror(code)))
    assert isinstance(error, StorageError) and isinstance(error, ExportError)
    message = str(error)
    assert message.startswith(f"could not write table {target}: ")
    assert words.format(f=tmp_path) in message
    assert message.endswith(".") and "\n" not in message and error.path == target


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_writes_under_the_cache_say_how_to_move_it(tmp_path, monkeypatch, code):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    error = write_error("model folder", tmp_path / "cache" / "models" / "x", OSError(code, "no"))
    assert "MEDVL_CACHE to a" in str(error)
    outside = write_error("model folder", tmp_path / "elsewhere", OSError(code, "no"))
    assert "MEDVL_CACHE" not in str(outside)


def test_a_model_folder_in_a_read_only_cache_says_to_move_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "models" / "medvl-demo"
    with failing_writes(tmp_path, errno.EROFS):
        with pytest.raises(StorageError, match=r"set MEDVL_CACHE to a writable folder\.$"):
            atomic_directory(folder, lambda staging: None, what="model folder")
    assert list(tmp_path.iterdir()) == []


def test_reporting_lets_sentences_and_other_errors_through(tmp_path):
    with pytest.raises(MedVLError, match="already a sentence"):
        with reporting_write_errors("x", tmp_path):
            raise MedVLError("already a sentence")
    with pytest.raises(KeyError):
        with reporting_write_errors("x", tmp_path):
            raise KeyError("not ours")
    with pytest.raises(StorageError, match="is full"):
        with reporting_write_errors("x", tmp_path):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_os_error_in_finds_the_refusal_behind_a_library_error():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("zip writer failed") from None
    except RuntimeError as wrapped:
        assert os_error_in(wrapped).errno == errno.ENOSPC
    rust = Exception("Error while serializing: I/O error: File too large (os error 27)")
    assert os_error_in(rust).errno == errno.EFBIG
    assert os_error_in(ValueError("bad value")) is None


def test_make_output_folder(tmp_path):
    assert make_output_folder(tmp_path / "a" / "b").is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    with pytest.raises(ExportError, match=r"is an existing file, not a folder; give a folder"):
        make_output_folder(blocker)
    with pytest.raises(StorageError, match=r"file is in the way: it is a file, not a folder"):
        make_output_folder(blocker / "sub")
    assert blocker.read_text() == "keep"
