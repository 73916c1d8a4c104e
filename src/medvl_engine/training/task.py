"""The contract between a model and the shared training loop.

A task owns its model, data and evaluation; :func:`medvl_engine.training.train`
owns optimisation, precision, distribution, checkpoints and logging. Both LIMIT and
TopKSigLIP are tasks driven by the same loop.

Required members of a task::

    name: str
    config: a dataclass (saved, resolved, in every checkpoint)
    build_model() -> nn.Module
        Called once per process before training; the loop moves it to the device.
    num_batches(epoch, rank, world_size) -> int
        Micro-batches this rank sees in ``epoch`` (equal on every rank under DDP).
    train_batches(epoch, rank, world_size, start) -> Iterable[batch]
        Yield this rank's micro-batches of ``epoch`` from index ``start`` on. The
        order must depend only on (task seed, epoch, rank, world_size), not on global
        RNG state, so that a resumed run sees the same batches ("sampler position").
        Loading should happen lazily, batch by batch.
    compute_losses(model, batch) -> dict[str, Tensor]
        Scalar loss terms; key ``"loss"`` is optimised, the others are logged. Under
        DDP ``model`` is the DistributedDataParallel wrapper: call ``model(...)`` (its
        forward) so gradients are synchronised; use :func:`unwrap_model` for other
        attributes. The batch is moved to the device with :func:`move_to_device`
        before this call.
    evaluate(model) -> dict[str, float]
        Called on rank 0 after each epoch with the unwrapped model in eval mode,
        under ``torch.no_grad``; global RNG state is restored afterwards.

Optional members::

    trainable_parameters(model) -> Iterable[Parameter]   (default: requires_grad ones)
    optimizer_groups(model) -> list[dict]   ({"params": [...], "lr_scale": float}; overrides
        trainable_parameters: each group trains at run.lr * lr_scale)
    save_pretrained(model, directory) -> None   (export of the best and final model)
    batch_at(epoch, rank, world_size, index) -> batch
        Micro-batch ``index`` of this rank in ``epoch``: the same value ``train_batches``
        yields at that position. It must be a pure function of its arguments and the task's
        data (no global RNG, no state left by earlier calls that changes the result), because
        with ``run.num_workers > 0`` the loop calls it in DataLoader worker processes, in any
        order, on a copy of the task. The task is pickled to each worker once per run (workers
        start with forkserver or spawn, which are safe with CUDA), so it must pickle, and it
        should pickle small: in-memory caches of decoded data belong out of its pickled state.
        Without ``batch_at``, or with ``run.num_workers = 0``, ``train_batches`` is used.
    evaluate_shard(model, rank, world_size) -> part  and  merge_evaluation(parts) -> dict
        (both or neither, see :class:`ShardedEvaluation`): every rank scores its share of
        the validation set; the gathered parts, in rank order, give the metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

__all__ = ["Task", "ShardedEvaluation", "unwrap_model", "move_to_device"]


@runtime_checkable
class Task(Protocol):
    """Structural type of a training task (see the module docstring for the contract)."""

    name: str
    config: Any

    def build_model(self) -> nn.Module: ...

    def num_batches(self, epoch: int, rank: int, world_size: int) -> int: ...

    def train_batches(
        self, epoch: int, rank: int, world_size: int, start: int = 0
    ) -> Iterable[Any]: ...

    def compute_losses(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]: ...

    def evaluate(self, model: nn.Module) -> dict[str, float]: ...


@runtime_checkable
class ShardedEvaluation(Protocol):
    """A task whose evaluation is split over the ranks (optional members of a :class:`Task`)."""

    def evaluate_shard(self, model: nn.Module, rank: int, world_size: int) -> Any: ...

    def merge_evaluation(self, parts: list[Any]) -> dict[str, float]: ...


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside DistributedDataParallel (or the module itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor in a (nested) dict/list/tuple/dataclass-free batch to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: move_to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, list):
        return [move_to_device(value, device) for value in batch]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(move_to_device(value, device) for value in batch))
    if isinstance(batch, tuple):
        return tuple(move_to_device(value, device) for value in batch)
    return batch
