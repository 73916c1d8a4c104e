"""A real Orthanc PACS with its DICOMweb plugin, started on a free localhost port for a test.

``running_orthanc(folder)`` writes a configuration into ``folder`` (storage and index there,
HTTP on 127.0.0.1 only, no DICOM port, no authentication), starts ``Orthanc``, waits until its
REST API answers and the DICOMweb plugin is loaded (about 0.2 s), yields an
:class:`OrthancServer`, and on the way out stops the process and removes what it wrote.
``orthanc_missing()`` says why no server can be started (binary or plugin absent), so a fixture
can skip with that reason. Install both with ``tools/install_dicom_tools.sh``.

The server refuses to store any instance whose PatientID is :data:`REFUSED_PATIENT_ID` (a Lua
``ReceivedInstanceFilter``), so that a test can see a real refusal of an upload.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "REFUSED_PATIENT_ID",
    "OrthancServer",
    "find_dicomweb_plugin",
    "orthanc_missing",
    "running_orthanc",
]

PLUGIN_FOLDERS = (
    Path("/usr/share/orthanc/plugins"),
    Path("/usr/lib/orthanc"),
    Path("/usr/local/share/orthanc/plugins"),
)
START_TIMEOUT_SECONDS = 15.0
REFUSED_PATIENT_ID = "MEDVL-REFUSE"
_REFUSING_FILTER = f"""
function ReceivedInstanceFilter(dicom, origin, info)
  return dicom.PatientID ~= "{REFUSED_PATIENT_ID}"
end
"""
STOP_GRACE_SECONDS = 0.3
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Talks to the local server directly, whatever proxy the environment names."""


@dataclasses.dataclass(frozen=True)
class OrthancServer:
    """A running Orthanc: ``port`` on 127.0.0.1, DICOMweb under ``/dicom-web``."""

    port: int
    folder: Path

    @property
    def url(self) -> str:
        """The REST API root, ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def dicomweb(self) -> str:
        """The DICOMweb root as medvl takes it: ``dicomweb://127.0.0.1:<port>/dicom-web``."""
        return f"dicomweb://127.0.0.1:{self.port}/dicom-web"

    def rest(self, path: str, method: str = "GET") -> object:
        """The JSON answer of Orthanc's own REST API (``/instances``, ``/studies``...)."""
        request = urllib.request.Request(self.url + path, method=method)
        with _DIRECT.open(request, timeout=10) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def instance_count(self) -> int:
        """How many instances the server holds."""
        stored = self.rest("/instances")
        assert isinstance(stored, list)
        return len(stored)

    def clear(self) -> None:
        """Delete every study, so that a test starts from an empty server."""
        studies = self.rest("/studies")
        assert isinstance(studies, list)
        for study in studies:
            self.rest(f"/studies/{study}", method="DELETE")


def find_dicomweb_plugin() -> Path | None:
    """The DICOMweb plugin's shared library, or None."""
    for folder in PLUGIN_FOLDERS:
        found = sorted(folder.glob("libOrthancDicomWeb.so*")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


def orthanc_missing() -> str | None:
    """Why no Orthanc can be started here (a skip reason), or None when it can."""
    if shutil.which("Orthanc") is None:
        return "Orthanc is not installed (tools/install_dicom_tools.sh installs it)"
    if find_dicomweb_plugin() is None:
        return "the Orthanc DICOMweb plugin is not installed (apt-get install orthanc-dicomweb)"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    """True once the REST API answers and the DICOMweb plugin is loaded."""
    try:
        with _DIRECT.open(f"http://127.0.0.1:{port}/plugins", timeout=1) as answer:
            return "dicom-web" in json.loads(answer.read())
    except (OSError, urllib.error.URLError, ValueError):
        return False


def _configuration(folder: Path, port: int, plugin: Path) -> dict[str, object]:
    storage = folder / "storage"
    script = folder / "refuse.lua"
    script.write_text(_REFUSING_FILTER)
    return {
        "LuaScripts": [str(script)],
        "Name": "medvl-test",
        "StorageDirectory": str(storage),
        "IndexDirectory": str(storage),
        "HttpPort": port,
        "DicomServerEnabled": False,
        "RemoteAccessAllowed": False,
        "AuthenticationEnabled": False,
        "HttpCompressionEnabled": False,
        "StorageCompression": False,
        "ConcurrentJobs": 1,
        "SaveJobs": False,
        "Plugins": [str(plugin)],
        "DicomWeb": {"Enable": True, "Root": "/dicom-web/"},
    }


@contextlib.contextmanager
def running_orthanc(folder: Path) -> Iterator[OrthancServer]:
    """Start Orthanc with its files under ``folder``, yield it once ready, stop and clean up.

    Raises RuntimeError (with the end of Orthanc's log) when it does not come up within
    START_TIMEOUT_SECONDS; call :func:`orthanc_missing` first to skip instead.
    """
    binary, plugin = shutil.which("Orthanc"), find_dicomweb_plugin()
    if binary is None or plugin is None:
        raise RuntimeError(orthanc_missing())
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "orthanc.log"
    for _attempt in range(3):  # another process may take the free port before Orthanc does
        port = _free_port()
        config = folder / "orthanc.json"
        config.write_text(json.dumps(_configuration(folder, port, plugin)))
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [binary, str(config)], stdout=log, stderr=subprocess.STDOUT, cwd=folder
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while process.poll() is None and time.monotonic() < deadline and not _answers(port):
            time.sleep(0.02)
        if process.poll() is None and _answers(port):
            break
        _stop(process)
    else:
        tail = log_path.read_text(errors="replace")[-2000:]
        shutil.rmtree(folder / "storage", ignore_errors=True)
        raise RuntimeError(f"Orthanc did not start; its log ends:\n{tail}")
    try:
        yield OrthancServer(port=port, folder=folder)
    finally:
        _stop(process)
        shutil.rmtree(folder / "storage", ignore_errors=True)
        for leftover in (config, log_path, folder / "refuse.lua"):
            leftover.unlink(missing_ok=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a short grace: a clean stop waits ~2 s for Orthanc's HTTP
    threads to poll, and the storage is thrown away anyway."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
