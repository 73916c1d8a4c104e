"""Fixtures of the training tests: free TCP ports and rank spawning for 2-rank gloo runs, and a
check that a worker process has exited."""

from __future__ import annotations

import os
import socket
import time

import pytest
import torch.multiprocessing as mp

from tests.support.gloo import WORLD

SPAWN_TIMEOUT_S = 240.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Errors of gloo's TCP transport itself, seen now and then when two ranks set up on one
# loopback (also in PyTorch's own CI); any other failure of a rank fails the test at once.
GLOO_TRANSPORT_ERRORS = ("Connection closed by peer", "Connection reset by peer")


def _run_ranks(worker, args: tuple) -> None:
    context = mp.start_processes(worker, args=args, nprocs=WORLD, join=False)
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the {WORLD} ranks did not finish within {SPAWN_TIMEOUT_S} s")


def _spawn_ranks(worker, args: tuple) -> None:
    """Run ``worker(rank, *args)`` on WORLD processes; fail (not hang) past SPAWN_TIMEOUT_S.

    ``args[0]`` is the rendezvous port. When the group fails with a gloo transport error,
    the ranks run once more on a fresh port.
    """
    try:
        _run_ranks(worker, args)
    except mp.ProcessRaisedException as error:
        if not any(text in str(error) for text in GLOO_TRANSPORT_ERRORS):
            raise
        _run_ranks(worker, (_free_port(), *args[1:]))


def _process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped counts as still there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="session")
def free_port():
    """``free_port()`` -> a TCP port on 127.0.0.1 that nothing listens on now."""
    return _free_port


@pytest.fixture(scope="session")
def spawn_ranks():
    """``spawn_ranks(worker, args)`` runs ``worker(rank, *args)`` on 2 ranks, failing past 240 s."""
    return _spawn_ranks


@pytest.fixture(scope="session")
def process_gone():
    """``process_gone(pid)`` -> whether that process has exited."""
    return _process_gone
