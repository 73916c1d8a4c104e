"""Whole DICOM files on the wire: a STOW body split back gives every file byte for byte, and
the one part of a WADO answer is found in other servers' forms too."""

from __future__ import annotations

import functools
import tempfile

import pytest
import requests

from medvl_engine.io.dicomweb._download import copy_range, dicom_part
from medvl_engine.io.dicomweb._parts import join_parts


def _part_of(body: bytes, content_type: str, tmp_path) -> bytes:
    with tempfile.TemporaryFile(dir=tmp_path) as handle:
        handle.write(body)
        handle.flush()
        start, end = dicom_part(handle, content_type)
        copy_range(handle, start, end, tmp_path / "part")
    return (tmp_path / "part").read_bytes()


def test_each_file_of_a_stow_body_comes_back_byte_for_byte(tmp_path, monkeypatch):
    import medvl_engine.io.dicomweb._parts as parts

    monkeypatch.setattr(parts, "CHUNK_BYTES", 100)  # files longer than a chunk
    import medvl_engine.io.dicomweb._download as download

    monkeypatch.setattr(download, "CHUNK_BYTES", 5)  # delimiters across chunk ends
    contents = [b"\x00" * 128 + b"DICM" + bytes(range(256)) * 3, b"--\r\n\r\n--x"]
    for index, data in enumerate(contents):
        path = tmp_path / f"f{index}.dcm"
        path.write_bytes(data)
        body, content_type = join_parts([path])
        # sent with a Content-Length, not chunked (some servers take chunks far slower)
        assert requests.utils.super_len(body) == len(body)
        sent = b"".join(iter(functools.partial(body.read, 7), b""))  # as the HTTP client reads
        assert len(sent) == len(body)
        assert _part_of(sent, content_type, tmp_path) == data


def test_the_part_is_found_in_other_servers_forms(tmp_path):
    body = b"preamble\r\n--b0\r\nContent-Type: application/dicom\r\nX: y\r\n\r\nONE\r\n--b0--\r\n"
    quoted = 'multipart/related; type="application/dicom"; boundary="b0"'
    assert _part_of(body, quoted, tmp_path) == b"ONE"
    assert _part_of(b"RAW", "application/dicom", tmp_path) == b"RAW"


@pytest.mark.parametrize(
    ("body", "content_type", "words"),
    [
        (b"<html>", "text/html", "not DICOM"),
        (b"x", "multipart/related", "no boundary"),
        (b"--b\r\n\r\nONE\r\n--b\r\n\r\nTWO\r\n--b--", "multipart/related; boundary=b", "more"),
        (b"--b\r\n\r\nONE", "multipart/related; boundary=b", "not closed"),
    ],
)
def test_answers_that_are_not_one_dicom_part(tmp_path, body, content_type, words):
    with pytest.raises(ValueError, match=words):
        _part_of(body, content_type, tmp_path)
