"""Process-group set-up under torchrun (gloo on CPU, nccl on CUDA) and small helpers."""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

__all__ = ["DistInfo", "init_distributed", "shutdown_distributed", "shard_indices", "barrier"]


@dataclasses.dataclass(frozen=True)
class DistInfo:
    """Where this process sits: global rank, world size, local rank, and the device it uses."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    initialised_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _pick_device(requested: str, local_rank: int) -> torch.device:
    if requested != "auto":
        device = torch.device(requested)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", local_rank)
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    return torch.device("cpu")


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the process group torchrun describes (env WORLD_SIZE > 1), else run alone.

    Backend: nccl when the device is CUDA, gloo otherwise. Safe to call when a group
    already exists (it is reused and not destroyed by :func:`shutdown_distributed`).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    chosen = _pick_device(device, local_rank)
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)
    initialised_here = False
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if chosen.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
        initialised_here = True
    if dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
    return DistInfo(rank, world_size, local_rank, chosen, initialised_here)


def shutdown_distributed(info: DistInfo) -> None:
    """Destroy the process group if :func:`init_distributed` created it."""
    if info.initialised_here and dist.is_initialized():
        dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    """Wait for every rank (no-op when running alone)."""
    if info.distributed and dist.is_initialized():
        dist.barrier()


def shard_indices(count: int, rank: int, world_size: int) -> list[int]:
    """Indices ``0..count-1`` a rank owns: strided, padded by wrap-around to equal length.

    Like torch's DistributedSampler without shuffling: every rank gets
    ``ceil(count / world_size)`` items so that collective calls stay in step.
    """
    if count == 0:
        return []
    per_rank = -(-count // world_size)
    padded = [i % count for i in range(per_rank * world_size)]
    return padded[rank::world_size]
