"""Fixtures of the DICOMweb tests: one real Orthanc per test module, emptied before each test,
a private cache folder per test, and a synthetic two-breast mammography exam."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.orthanc import OrthancServer, orthanc_missing, running_orthanc


@pytest.fixture(autouse=True)
def _local_servers_without_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test servers listen on 127.0.0.1: never route them through a configured proxy."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def orthanc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OrthancServer]:
    reason = orthanc_missing()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("dicomweb_client", reason="dicomweb-client is not installed")
    with running_orthanc(tmp_path_factory.mktemp("orthanc")) as server:
        yield server


@pytest.fixture
def server(orthanc: OrthancServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The module's Orthanc, empty, with this test's own medvl cache."""
    orthanc.clear()
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    return orthanc


@pytest.fixture
def mammo_exam(tmp_path: Path) -> list[Path]:
    """Four synthetic views of one exam (one study): L CC, L MLO, R CC, R MLO."""
    from medvl_engine.synthetic import make_mammogram_case

    folder = tmp_path / "exam"
    for seed, side in ((1, "L"), (2, "R")):
        make_mammogram_case(folder, seed=seed, laterality=side, size=(192, 128), exam_id="x1")
    return sorted(folder.glob("*.dcm"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
