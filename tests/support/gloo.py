"""Joining and leaving a gloo group (2 ranks unless told), called inside ranks started by
torch.multiprocessing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

WORLD = 2


def join_group(rank: int, port: int, world_size: int = WORLD) -> None:
    """Set the torchrun environment of ``rank`` of ``world_size`` on 127.0.0.1:``port``, one
    thread."""
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    torch.set_num_threads(1)


def leave(result_path: Path, results: dict) -> None:
    """Write a rank's results, then exit at once: a gloo process can stall in interpreter
    shutdown after its work is done, which would keep the parent waiting."""
    result_path.write_text(json.dumps(results))
    os._exit(0)
