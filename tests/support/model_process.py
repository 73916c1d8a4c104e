"""A napari session in a fresh interpreter with the model process switched on, and the checks
that the model process it started has stopped with its viewer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Generator
from typing import Any

from napari_medvl._worker_process import ENV_SWITCH

CLOSE_AND_REPORT = r"""
viewer.close()
for _ in range(200):
    app.processEvents()
    if _worker_process._shared is None and not [
        t for t in __import__("threading").enumerate() if t.name == "medvl-model-stop"
    ]:
        break
    time.sleep(0.05)
report["stopped_with_viewer"] = _worker_process._shared is None
print(json.dumps(report))
"""
"""The end of every probe: close its ``viewer`` (which stops the model process), run the
events of ``app`` until the process is gone, then print the probe's ``report`` as JSON, with
"stopped_with_viewer": whether the process had stopped before the interpreter's exit."""


def run_probe(probe: str, *args: str, timeout: float) -> dict[str, Any]:
    """Run ``probe`` (a script that leaves ``viewer``, ``app``, ``_worker_process``, ``json``,
    ``time`` and a ``report`` dict defined) followed by :data:`CLOSE_AND_REPORT` in a fresh
    interpreter with ``args`` as ``sys.argv[1:]``, the model process on and the hub offline;
    return its report (a test failure showing its stderr if it printed none)."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", ENV_SWITCH: "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe + CLOSE_AND_REPORT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1])


def gone(pid: int) -> bool:
    """True once no process (not even a zombie) has ``pid``."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            return "zombie" in status.read()
    except FileNotFoundError:
        return True


def assert_gone_soon(pid: int, seconds: float = 10.0) -> None:
    """Fail unless the process ``pid`` is gone within ``seconds``."""
    deadline = time.time() + seconds
    while not gone(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert gone(pid), f"process {pid} is still running {seconds:g} s later"


def finished(steps: Generator[Any, None, Any]) -> Any:
    """Run a job's generator of progress steps to its end; return what it returned."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def assert_stopped_with_viewer(report: dict[str, Any]) -> None:
    """Fail unless the probe's model process stopped when its viewer closed (before the
    interpreter's exit, which would stop it anyway) and is gone."""
    assert report["child"] is not None, "the probe started no model process"
    assert report["stopped_with_viewer"], "the model process outlived its viewer"
    assert_gone_soon(report["child"])
