"""What goes wrong with a PACS, each in one sentence with exit status 2, and nothing lost:
not DICOM, no CC/MLO pair, server down, upload refused, answer too slow, unknown study."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pydicom
import pytest

from medvl_engine.cli.main import main
from medvl_engine.io.dicomweb import (
    NoMammoPairError,
    NotOnServerError,
    ServerRefusedError,
    ServerTimeoutError,
    ServerUnreachableError,
    resolve_mammo_study,
    search_studies,
    send,
)
from medvl_engine.io.dicomweb import parse_reference as ref
from tests.engine.io.dicomweb.conftest import digest
from tests.support.orthanc import REFUSED_PATIENT_ID


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("medvl: error: ")
    return err[0]


def test_a_file_that_is_not_dicom_stops_the_send_before_anything_goes(
    server, mammo_exam, tmp_path, capsys
):
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    assert main(["send", str(mammo_exam[0]), str(notes), "--to", server.dicomweb]) == 2
    line = _one_error_line(capsys)
    assert "notes.txt is not a DICOM file" in line and "nothing was sent" in line
    assert server.instance_count() == 0  # the good file did not go either


def test_a_study_without_a_cc_mlo_pair(server, mammo_exam):
    only_cc = [path for path in mammo_exam if path.stem.endswith("_CC")]
    send(only_cc, server.dicomweb)
    study = str(pydicom.dcmread(only_cc[0], stop_before_pixels=True).StudyInstanceUID)
    with pytest.raises(NoMammoPairError) as raised:
        resolve_mammo_study(f"{server.dicomweb}/studies/{study}")
    assert "no CC and MLO view of the same breast (found L CC, R CC among 2" in str(raised.value)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_server_down_keeps_the_files_and_the_same_send_works_later(server, mammo_exam, capsys):
    before = [digest(path) for path in mammo_exam]
    down = f"dicomweb://127.0.0.1:{_closed_port()}/dicom-web"
    assert main(["send", *map(str, mammo_exam), "--to", down]) == 2
    line = _one_error_line(capsys)
    assert "connection refused" in line and "0 of 4 file(s) were stored" in line
    assert "send them again later" in line
    assert [digest(path) for path in mammo_exam] == before
    # later, the same files go to a server that runs
    assert main(["send", *map(str, mammo_exam), "--to", server.dicomweb]) == 0
    assert server.instance_count() == 4
    with pytest.raises(ServerUnreachableError):
        search_studies(ref(down), timeout=5)


def test_a_refused_upload_is_reported_and_the_file_kept(server, mammo_exam, tmp_path, capsys):
    dataset = pydicom.dcmread(mammo_exam[0])
    dataset.PatientID = REFUSED_PATIENT_ID  # the test server's filter drops this patient
    refused = tmp_path / "refused.dcm"
    dataset.save_as(refused)
    before = digest(refused)
    assert main(["send", str(mammo_exam[1]), str(refused), "--to", server.dicomweb]) == 2
    line = _one_error_line(capsys)
    assert "does not list 1 of the 2 file(s), refused.dcm among them" in line
    assert digest(refused) == before
    # an HTTP error: a path where the server has no DICOMweb service
    with pytest.raises(NotOnServerError, match="has no DICOMweb service"):
        send([mammo_exam[0]], f"dicomweb://127.0.0.1:{server.port}/not-dicom-web")


def test_an_unknown_study_or_series(server, capsys):
    assert main(["info", f"{server.dicomweb}/studies/1.2.3.4"]) == 2
    assert "has no study 1.2.3.4" in _one_error_line(capsys)
    assert main(["info", f"{server.dicomweb}/studies/1.2.3/series/4.5"]) == 2
    assert "has no instances at" in _one_error_line(capsys)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers every request with ``status`` and ``body`` (after ``release`` is set when
    ``slow``)."""

    release: threading.Event
    slow: bool
    status: int
    body: bytes

    def _answer(self) -> None:
        if self.slow:
            self.release.wait(10)  # answers after the client gave up (or when the test ends)
        self.send_response(self.status)
        self.send_header("Content-Type", "application/dicom")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _local_http_server(slow: bool, status: int, body: bytes = b"") -> Iterator[str]:
    release = threading.Event()
    settings = {"release": release, "slow": slow, "status": status, "body": body}
    handler = type("Handler", (_Handler,), settings)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"dicomweb://127.0.0.1:{httpd.server_address[1]}/dicom-web"
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_a_slow_server_times_out_in_one_sentence(mammo_exam, capsys):
    with _local_http_server(slow=True, status=200) as slow:
        started = time.monotonic()
        assert main(["send", str(mammo_exam[0]), "--to", slow, "--timeout", "0.3"]) == 2
        assert time.monotonic() - started < 5
        line = _one_error_line(capsys)
        assert "did not answer within 0.3 s while storing 1 file(s)" in line
        assert "every file is kept unchanged" in line
        assert main(["info", slow, "--timeout", "0.3"]) == 2
        assert "did not answer within 0.3 s while searching for studies" in _one_error_line(capsys)
        with pytest.raises(ServerTimeoutError):
            resolve_mammo_study(f"{slow}/studies/1.2.3", timeout=0.3)


def test_a_server_error_status_is_one_sentence(mammo_exam):
    with _local_http_server(slow=False, status=503) as failing:
        with pytest.raises(ServerRefusedError, match="refused storing 1 file.s. with HTTP 503"):
            send([mammo_exam[0]], failing, timeout=5)


def test_send_written_sends_only_the_dicom_outputs(server, mammo_exam, tmp_path, capsys):
    from medvl_engine.cli._dicomweb import send_written
    from medvl_engine.errors import ConfigError

    picture = tmp_path / "overlay.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    send_written([picture, mammo_exam[0]], ref(server.dicomweb), timeout=10)
    assert "sent 1 file(s)" in capsys.readouterr().out
    assert server.instance_count() == 1
    with pytest.raises(ConfigError, match="none of the outputs is a DICOM file"):
        send_written([picture], ref(server.dicomweb), timeout=10)


def test_an_answer_with_another_instance_is_refused(tmp_path, monkeypatch, mammo_exam):
    from medvl_engine.io.dicomweb import DicomWebError, InstanceEntry, retrieve_instances

    other = mammo_exam[0].read_bytes()
    got = str(pydicom.dcmread(mammo_exam[0], stop_before_pixels=True).SOPInstanceUID)
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    asked = InstanceEntry("1.2", "1.2.3", "1.2.3.4", "", "MG", 1, "L", "CC", None, 8, 8)
    with _local_http_server(slow=False, status=200, body=other) as wrong:
        with pytest.raises(DicomWebError) as raised:
            retrieve_instances(ref(wrong), [asked], timeout=5)
    assert f"answered the request for instance 1.2.3.4 with instance {got}" in str(raised.value)
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file()]
