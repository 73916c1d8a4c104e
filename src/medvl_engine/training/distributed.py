"""Process-group set-up under torchrun (gloo on CPU, nccl on CUDA) and small helpers.

:func:`gather_with_grad` concatenates a batch tensor over ranks so that a loss scores
every pair of the global batch (B per rank x W ranks gives (BW)^2 pairs), with gradients
flowing back to the rank that owns each row; :func:`gather_objects` collects picklable
evaluation results from every rank without a barrier; :func:`mean_over_ranks` averages a
step's loss and says whether it was finite on every rank.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "DistInfo",
    "init_distributed",
    "shutdown_distributed",
    "shard_indices",
    "barrier",
    "gather_with_grad",
    "gather_objects",
    "mean_over_ranks",
    "wrap_ddp",
    "world_size",
    "DEFAULT_TIMEOUT_MINUTES",
]

DEFAULT_TIMEOUT_MINUTES = 120.0


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


def init_distributed(
    device: str = "auto", timeout_minutes: float = DEFAULT_TIMEOUT_MINUTES
) -> DistInfo:
    """Join the process group torchrun describes (env WORLD_SIZE > 1), else run alone.

    Backend: nccl when the device is CUDA, gloo otherwise. ``timeout_minutes`` is how long
    a collective waits for the slowest rank before the run fails (NCCL's own default is
    10 minutes). Safe to call when a group already exists (it is reused and not destroyed
    by :func:`shutdown_distributed`).
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
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(minutes=timeout_minutes),
        )
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


def wrap_ddp(model: nn.Module, info: DistInfo, find_unused_parameters: bool) -> nn.Module:
    """``model`` inside DistributedDataParallel when there is more than one rank, else itself
    (on CUDA the wrapper's device is this rank's)."""
    if not info.distributed:
        return model
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=[info.device.index] if info.device.type == "cuda" else None,
        find_unused_parameters=find_unused_parameters,
    )


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


def world_size() -> int:
    """Ranks in the current process group (1 when no group is initialised)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 whose backward returns this rank's slice of the summed gradient.

    Every rank computes the same global loss from the gathered tensor, so the gradient of a
    row is the sum over ranks of that loss's gradient (an all-reduce), i.e. ``W`` times the
    single-process gradient; DistributedDataParallel divides parameter gradients by ``W``,
    so an optimiser step equals the single-process step on the full batch.
    """

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor) -> torch.Tensor:
        sizes = torch.tensor([local.shape[0]], dtype=torch.long, device=local.device)
        all_sizes = [torch.zeros_like(sizes) for _ in range(dist.get_world_size())]
        dist.all_gather(all_sizes, sizes)
        counts = [int(size.item()) for size in all_sizes]
        widest = max(counts)
        padded = local.new_zeros((widest, *local.shape[1:]))
        padded[: local.shape[0]] = local
        pieces = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(pieces, padded.contiguous())
        rank = dist.get_rank()
        pieces[rank] = local  # this rank's rows exactly as given (no round trip)
        ctx.counts, ctx.rank = counts, rank
        rows = [piece[:count] for piece, count in zip(pieces, counts, strict=True)]
        return torch.cat(rows, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        total = grad.contiguous().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        start = sum(ctx.counts[: ctx.rank])
        return total[start : start + ctx.counts[ctx.rank]]


def gather_with_grad(local: torch.Tensor) -> torch.Tensor:
    """``local`` (``[B_r, ...]``) of every rank concatenated in rank order: ``[sum B_r, ...]``.

    Returns ``local`` itself when running alone. Ranks may hold different batch sizes.
    Gradients flow back to each rank's own rows (see :class:`_GatherWithGrad`); a tensor
    that does not require a gradient (labels, tabular vectors) is gathered the same way.
    Every rank must call this the same number of times in the same order.
    """
    if world_size() == 1:
        return local
    if not local.requires_grad:
        with torch.no_grad():
            return _gather_with_grad(local)
    return _gather_with_grad(local)


def _gather_with_grad(local: torch.Tensor) -> torch.Tensor:
    gathered: torch.Tensor = _GatherWithGrad.apply(local)  # type: ignore[no-untyped-call]  # torch leaves Function.apply unannotated
    return gathered


def gather_objects(value: Any) -> list[Any]:
    """``value`` of every rank in rank order (``[value]`` when running alone).

    A collective, not a barrier: each rank blocks only until every rank has its result,
    so ranks that evaluate their shard at the same pace never wait idle for one rank.
    """
    if world_size() == 1:
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def mean_over_ranks(value: float, info: DistInfo, device: torch.device) -> tuple[bool, float]:
    """(whether ``value`` is finite on every rank, its mean over the ranks).

    Alone: ``(isfinite(value), value)``. Under DDP one all-reduce of ``[value or 0, 0 or 1]``
    counts the ranks with a non-finite value; the mean is NaN when there is any.
    """
    finite_here = math.isfinite(value)
    if not info.distributed:
        return finite_here, value
    packed = torch.tensor(
        [value if finite_here else 0.0, 0.0 if finite_here else 1.0],
        dtype=torch.float64,
        device=device,
    )
    dist.all_reduce(packed)
    finite = packed[1].item() == 0.0
    return finite, packed[0].item() / info.world_size if finite else float("nan")
