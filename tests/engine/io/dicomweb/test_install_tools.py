"""tools/install_dicom_tools.sh: quiet when the tools are there, one line when it cannot
install them, exit 0 either way."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[4] / "tools" / "install_dicom_tools.sh"


def _run(path: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash") or "/bin/bash"
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [bash, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_without_the_tools_and_without_apt_it_says_so_in_one_line(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").symlink_to(shutil.which("id") or "/usr/bin/id")  # no apt-get, no Orthanc
    done = _run(str(bin_dir))
    assert done.returncode == 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and done.stdout == ""
    assert lines[0].startswith("DICOM tools missing (orthanc")
    assert "dicom3tools" in lines[0] and "are skipped" in lines[0]


@pytest.mark.skipif(
    not (shutil.which("Orthanc") and shutil.which("dciodvfy")), reason="DICOM tools absent"
)
def test_with_the_tools_installed_it_does_nothing():
    done = _run(os.environ["PATH"])
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
