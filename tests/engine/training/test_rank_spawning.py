"""The 2-rank spawner of the training tests: a gloo transport error gets one more run on a
fresh port; any other error of a rank fails at once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.multiprocessing as mp


def _flaky_worker(rank: int, port: int, folder: str, message: str) -> None:
    Path(folder, f"port{port}-rank{rank}").touch()
    if len(list(Path(folder).glob(f"port*-rank{rank}"))) == 1:  # the first run fails
        raise RuntimeError(message)


def test_a_gloo_transport_error_runs_the_ranks_again_on_a_fresh_port(
    tmp_path, spawn_ranks, free_port
):
    port = free_port()
    spawn_ranks(_flaky_worker, (port, str(tmp_path), "Connection closed by peer [127.0.0.1]:1"))
    ports = {path.name.split("-")[0] for path in tmp_path.iterdir()}
    assert len(ports) == 2 and f"port{port}" in ports


def test_any_other_error_of_a_rank_fails_at_once(tmp_path, spawn_ranks, free_port):
    with pytest.raises(mp.ProcessRaisedException, match="shapes differ"):
        spawn_ranks(_flaky_worker, (free_port(), str(tmp_path), "shapes differ"))
    assert len({path.name.split("-")[0] for path in tmp_path.iterdir()}) == 1
