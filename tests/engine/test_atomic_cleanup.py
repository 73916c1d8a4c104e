"""No leftovers: temporaries removed on every exit path, swept after a kill, outputs renamed
together so a stopped job leaves the old set of files or the new one."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from medvl_engine import atomic_directory, atomic_write
from medvl_engine.cli.main import main
from medvl_engine.common.atomic import atomic_group, sweep_stale_temporaries
from medvl_engine.errors import ExportError
from medvl_engine.heatmap import Heatmap

REPO = Path(__file__).resolve().parents[2]
PATCHES = 60


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".medvl-tmp-" in p.name)


def _wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the subprocess")
        time.sleep(0.02)


def _start(script: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


_SLOW_ATOMIC_WRITE = """
    import sys, time
    from pathlib import Path
    from medvl_engine.common.atomic import atomic_write_stream
    from medvl_engine.common.termination import stop_signals_raise

    def slow(handle):
        for _ in range(600):  # a 60 s write of 600 chunks, like a big checkpoint on a slow disk
            handle.write(b"x" * 4096)
            handle.flush()
            time.sleep(0.1)

    with stop_signals_raise():
        atomic_write_stream(Path(sys.argv[1]), slow, binary=True, what="checkpoint")
"""


def _kill_during_slow_write(folder: Path, signum: int) -> subprocess.Popen:
    target = folder / "checkpoint.pt"
    target.write_bytes(b"old checkpoint")
    process = _start(_SLOW_ATOMIC_WRITE, str(target))
    _wait_for(lambda: any(p.stat().st_size for p in folder.glob(".checkpoint.medvl-tmp-*")))
    process.send_signal(signum)
    process.communicate(timeout=60)
    assert target.read_bytes() == b"old checkpoint"
    return process


def test_sigterm_during_a_write_removes_the_temporary_at_once(tmp_path):
    process = _kill_during_slow_write(tmp_path, signal.SIGTERM)
    assert process.returncode == 143
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_sigkill_leftover_is_swept_by_the_next_write_into_the_folder(tmp_path):
    process = _kill_during_slow_write(tmp_path, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    (leftover,) = _temporaries(tmp_path)
    assert f"-{process.pid}-" in leftover  # the writer's process id is in the name
    atomic_write(tmp_path / "other.csv", lambda temporary: temporary.write_text("a,b\n"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "other.csv"]


def test_temporaries_of_live_writers_and_recent_remote_ones_are_kept(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # names as atomic_write makes them: .{stem}.medvl-tmp-{host}-{pid}-{8 hex}{suffix}
        host = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]
        other = "0" * 6 if host != "000000" else "1" * 6
        live = tmp_path / f".a.medvl-tmp-{host}-{sleeper.pid}-0123abcd.png"
        remote_new = tmp_path / f".b.medvl-tmp-{other}-1-0123abcd.png"
        remote_old = tmp_path / f".c.medvl-tmp-{other}-1-0123abcd.png"
        for path in (live, remote_new, remote_old):
            path.write_bytes(b"partial")
        two_hours_ago = time.time() - 7200
        os.utime(remote_old, (two_hours_ago, two_hours_ago))
        removed = sweep_stale_temporaries(tmp_path, force=True)
        assert [p.name for p in removed] == [remote_old.name]
        assert live.exists() and remote_new.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert [p.name for p in sweep_stale_temporaries(tmp_path, force=True)] == [live.name]


def test_temporaries_of_older_versions_are_swept_only_when_old_and_beside_their_file(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"ckpt")
    (tmp_path / "report.csv").write_text("kept")
    old_temporary = tmp_path / ".checkpoint-3fa9c2b1.pt"  # what a killed save used to leave
    dated_backup = tmp_path / ".report-20240101.csv"  # a user's file that looks alike
    recent_temporary = tmp_path / ".checkpoint-77aa00ff.pt"
    for path in (old_temporary, dated_backup, recent_temporary):
        path.write_bytes(b"x")
    for path in (old_temporary, dated_backup):
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    removed = sweep_stale_temporaries(tmp_path, force=True)
    assert [p.name for p in removed] == [old_temporary.name]
    assert dated_backup.exists() and recent_temporary.exists()


def test_a_folder_caught_between_its_two_renames_gets_its_old_copy_back(tmp_path):
    # killed after moving the old model aside, before renaming the new one into place
    staging = tmp_path / ".model.medvl-tmp-abcdef-1-0123abcd"
    (staging / "previous").mkdir(parents=True)
    (staging / "previous" / "config.json").write_text("old model")
    (staging / "new").mkdir()
    os.utime(staging, (time.time() - 7200, time.time() - 7200))
    sweep_stale_temporaries(tmp_path, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert (tmp_path / "model" / "config.json").read_text() == "old model"
    atomic_directory(tmp_path / "model", lambda staging: (staging / "x").write_text("new"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_group_renames_all_outputs_or_none(tmp_path):
    first, second = tmp_path / "a.png", tmp_path / "a.geojson"
    first.write_text("old png")
    second.write_text("old geojson")

    with pytest.raises(ExportError, match="could not write"):
        with atomic_group():
            atomic_write(first, lambda temporary: temporary.write_text("new png"))
            assert first.read_text() == "old png"  # not in place before the group ends
            atomic_write(second, lambda temporary: (_ for _ in ()).throw(OSError(28, "full")))
    assert (first.read_text(), second.read_text()) == ("old png", "old geojson")
    assert _temporaries(tmp_path) == []

    with atomic_group():
        atomic_write(first, lambda temporary: temporary.write_text("draft"))
        atomic_write(first, lambda temporary: temporary.write_text("new png"))
        atomic_write(second, lambda temporary: temporary.write_text("new geojson"))
    assert (first.read_text(), second.read_text()) == ("new png", "new geojson")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.geojson", "a.png"]


def _saved_heatmap(path: Path) -> Path:
    from medvl_engine.export import write_npz

    side = 10
    coords = np.array([(x * 64, y * 64) for y in range(side) for x in range(side)][:PATCHES])
    scores = np.linspace(0.0, 1.0, PATCHES, dtype=np.float32)
    grid = np.full((side, side), np.nan, np.float32)
    grid.ravel()[:PATCHES] = scores
    heatmap = Heatmap(
        grid=grid,
        scores=scores,
        origin_level0=(0, 0),
        cell_size_level0=64,
        scale=(64.0, 64.0),
        translate=(0.0, 0.0),
        units="px",
        prompt="tumor",
    )
    return write_npz(path, heatmap, coords, 64, None, (side * 64, side * 64))


_SLOW_EXPORT = """
    import csv, sys, time
    from medvl_engine.cli.main import main

    real_writer = csv.writer

    class SlowWriter:  # one row every 50 ms, as on a slow network share
        def __init__(self, handle, *args, **kwargs):
            self.handle, self.inner = handle, real_writer(handle, *args, **kwargs)

        def writerow(self, row):
            self.inner.writerow(row)
            self.handle.flush()
            time.sleep(0.05)

        def writerows(self, rows):
            for row in rows:
                self.writerow(row)

    csv.writer = SlowWriter
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_medvl_export_stopped_midway_leaves_the_old_pair(tmp_path, signum, capsys):
    npz = _saved_heatmap(tmp_path / "h.npz")
    out = tmp_path / "out"
    out.mkdir()
    geojson, table = out / "h.geojson", out / "h.csv"
    geojson.write_text("old geojson")
    table.write_text("old csv")
    argv = ["export", str(npz), "--out", str(geojson), "--out", str(table)]
    process = _start(_SLOW_EXPORT, *argv)
    # the GeoJSON is complete under its temporary name; the CSV is being written
    _wait_for(lambda: any(p.stat().st_size for p in out.glob(".h.medvl-tmp-*.csv")))
    assert len(_temporaries(out)) == 2
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert (geojson.read_text(), table.read_text()) == ("old geojson", "old csv")
    if signum == signal.SIGTERM:
        assert process.returncode == 143
        assert err.strip().splitlines() == ["medvl: stopped (SIGTERM)"]
        assert _temporaries(out) == []
    else:
        assert len(_temporaries(out)) == 2

    assert main(argv) == 0  # the next run sweeps what a killed one left and writes both
    assert capsys.readouterr().out.split() == [str(geojson), str(table)]
    assert _temporaries(out) == []
    assert json.loads(geojson.read_text())["type"] == "FeatureCollection"
    assert len(table.read_text().splitlines()) == PATCHES + 1
