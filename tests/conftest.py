"""Shared fixtures. Tests never touch the network."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DATA = Path(os.environ.get("MEDVL_SAMPLE_DATA", REPO_ROOT.parent / "shared" / "sample-data"))


@pytest.fixture(scope="session")
def sample_data() -> Path:
    """Folder of real sample files (../shared/sample-data); skips when absent."""
    if not SAMPLE_DATA.is_dir():
        pytest.skip(f"sample data folder {SAMPLE_DATA} is absent")
    return SAMPLE_DATA


@pytest.fixture(scope="session")
def sample_file(sample_data: Path):
    """Return a function giving the path of one sample file, skipping when it is absent."""

    def get(relative: str) -> Path:
        path = sample_data / relative
        if not path.exists():
            pytest.skip(f"sample file {relative} is absent")
        return path

    return get


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", help="also run tests marked slow (minutes each)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` tests opt in (--run-slow or -m slow); `gpu` tests need CUDA."""
    selected_by_marker = "slow" in (config.getoption("-m") or "")
    run_slow = config.getoption("--run-slow") or selected_by_marker
    cuda = None
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow: run with --run-slow"))
        if "gpu" in item.keywords:
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
            if not cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


# Runs the command as a grandchild: Linux carries a process's peak RSS across fork and exec, so
# a child forked straight from this (large) test process would report this process's peak. The
# launcher is a fresh small interpreter; what it forks starts from its small footprint.
_LAUNCHER = """
import json, os, resource, sys
size, report, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (size, size))
    os.execvp(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
code = os.waitstatus_to_exitcode(status)
with open(report, "w") as stream:
    json.dump({"returncode": code, "maxrss_kb": usage.ru_maxrss}, stream)
sys.exit(code if code >= 0 else 128 - code)
"""


def _limited_run(
    command: Sequence[str] | str, timeout_s: float, max_mb: float, address_space_mb: float
) -> tuple[int, str, str, float]:
    import json

    target = [sys.executable, "-c", command] if isinstance(command, str) else list(command)
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryDirectory() as folder,
    ):
        report = Path(folder) / "report.json"
        size = str(int(address_space_mb * 2**20))
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, size, str(report), *target],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        returncode, peak_mb = process.returncode, 0.0
        if report.exists():
            result = json.loads(report.read_text())
            returncode, peak_mb = result["returncode"], result["maxrss_kb"] / 1024.0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    if timed_out:
        stderr += f"\n[run_limited: killed after {timeout_s} s]"
    if peak_mb > max_mb:
        stderr += f"\n[run_limited: peak RSS {peak_mb:.0f} MB is over {max_mb} MB]"
    return returncode, stdout, stderr, peak_mb


@pytest.fixture
def run_limited():
    """Run a command in a child process with bounded address space and time.

    ``run_limited(command, timeout_s, max_mb, address_space_mb=3072)`` runs ``command`` (an
    argv list, or a string of Python code run with this interpreter) with RLIMIT_AS set to
    ``address_space_mb`` and kills its process group after ``timeout_s`` seconds. It returns
    ``(returncode, stdout, stderr, peak_rss_mb)``: returncode is negative for a signal (-9
    after a timeout), peak_rss_mb the child's own maximum resident set. When the child ran
    out of time or went over ``max_mb`` a note saying so is appended to stderr; the caller
    asserts on the numbers.
    """

    def run(
        command: Sequence[str] | str,
        timeout_s: float = 10.0,
        max_mb: float = 1024.0,
        address_space_mb: float = 3072.0,
    ) -> tuple[int, str, str, float]:
        return _limited_run(command, timeout_s, max_mb, address_space_mb)

    return run
