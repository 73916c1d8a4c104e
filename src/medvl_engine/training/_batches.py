"""Micro-batches for the shared loop: the task's own generator, or DataLoader worker processes.

With ``run.num_workers = 0`` (or a task without ``batch_at``) the loop iterates
``task.train_batches(epoch, rank, world_size, start)`` in the training process. With workers,
one :class:`torch.utils.data.DataLoader` serves the whole run: its sampler (in the training
process) yields the keys ``(epoch, index)`` for ``index`` in ``[start, count)``, and each worker
answers a key with ``task.batch_at(epoch, rank, world_size, index)``. Batch ``index`` therefore
depends only on (task seed, epoch, rank, world_size, index), whichever worker loads it, and a
resumed run (``start > 0``) sees exactly the batches an uninterrupted run sees.

Workers are started with ``forkserver`` (``spawn`` where that is missing): a process forked
from a training process that has touched CUDA is unsafe, so the task is pickled to each worker
once per run (``persistent_workers``). Before each batch a worker seeds ``random``, NumPy and
torch from (seed, epoch, rank, index), so even a task that wrongly draws from global RNG state
gets the same batch from any worker; the loader draws its own seeds from a private generator,
so the training process's global RNG (dropout, Gumbel noise) advances exactly as without
workers. A batch that fails to load comes back as a
:class:`_BatchFailure` and is raised in the training process as one :class:`DataError`
sentence naming the batch; the loader's workers are shut down when the run ends or fails.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from medvl_engine.errors import ConfigError, DataError, MedVLError
from medvl_engine.training.config import RunConfig

__all__ = ["WorkerBatches", "uses_workers", "worker_context"]


def uses_workers(task: Any, config: RunConfig) -> bool:
    """Whether the run loads batches in DataLoader workers (``num_workers > 0`` and a task
    with ``batch_at``)."""
    return config.num_workers > 0 and callable(getattr(task, "batch_at", None))


def worker_context() -> multiprocessing.context.BaseContext:
    """The start method of DataLoader workers: forkserver (a fork of a process that never
    touched CUDA), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _derived_seed(*parts: int) -> int:
    """A 63-bit seed mixed from integers (NumPy's SeedSequence hash)."""
    state = np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2)
    return (int(state[0]) << 31 ^ int(state[1])) & (2**63 - 1)


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch.manual_seed(seed)


def _init_worker(seed: int, epoch: int, rank: int, worker_id: int) -> None:
    """``worker_init_fn``: seed a new worker's global RNGs from (seed, epoch, rank, worker id)."""
    _seed_globals(_derived_seed(seed, epoch, rank, worker_id))


@dataclass(frozen=True)
class _BatchFailure:
    """Stand-in for a batch whose loading raised in a worker (the reason, one line)."""

    epoch: int
    index: int
    reason: str
    path: str | None = None


def _one_line(error: BaseException) -> str:
    text = error.message if isinstance(error, MedVLError) else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = " ".join(lines)
    if not isinstance(error, MedVLError):
        reason = f"{type(error).__name__}: {reason}" if reason else type(error).__name__
    return reason.rstrip(".")


class _TaskBatches(Dataset[Any]):
    """Map-style dataset of one rank's micro-batches, keyed by ``(epoch, index)``."""

    def __init__(self, task: Any, rank: int, world_size: int, seed: int) -> None:
        self.task = task
        self.rank = rank
        self.world_size = world_size
        self.seed = seed

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        _seed_globals(_derived_seed(self.seed, epoch, self.rank, index))
        try:
            return self.task.batch_at(epoch, self.rank, self.world_size, index)
        except Exception as error:  # reported in the training process as one sentence
            path = getattr(error, "path", None) or getattr(error, "filename", None)
            return _BatchFailure(epoch, index, _one_line(error), str(path) if path else None)


class _EpochSampler(Sampler[tuple[int, int]]):
    """Yields ``(epoch, index)`` for ``index`` in ``[start, count)`` of the epoch set last."""

    def __init__(self) -> None:
        self.epoch, self.start, self.count = 0, 0, 0

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((self.epoch, index) for index in range(self.start, self.count))

    def __len__(self) -> int:
        return max(self.count - self.start, 0)


def _as_is(batch: Any) -> Any:
    """``collate_fn``: the batch exactly as ``batch_at`` returned it."""
    return batch


class WorkerBatches:
    """One rank's micro-batches loaded by DataLoader worker processes, for a whole run.

    ``epoch(epoch, start, count)`` iterates batches ``start .. count - 1`` of ``epoch``;
    :meth:`close` stops the workers (also after a failure: call it in ``finally``).
    """

    def __init__(
        self, task: Any, config: RunConfig, rank: int, world_size: int, device: torch.device
    ) -> None:
        self.task_name = str(getattr(task, "name", type(task).__name__))
        self.rank = rank
        self._check_picklable(task)
        self._sampler = _EpochSampler()
        self._dataset = _TaskBatches(task, rank, world_size, config.seed)
        self._config = config
        self._device = device
        self._loader: DataLoader[Any] | None = None
        self._iterator: Any = None

    def _check_picklable(self, task: Any) -> None:
        try:
            pickle.dumps(task)
        except Exception as error:
            raise ConfigError(
                f"task {self.task_name} cannot be sent to DataLoader worker processes "
                f"({_one_line(error)}); set run.num_workers=0 to load batches in the training "
                "process."
            ) from None

    def pin_memory(self) -> bool:
        """``run.pin_memory``, with ``auto`` meaning on when training on CUDA."""
        setting = self._config.pin_memory
        return self._device.type == "cuda" if setting == "auto" else bool(setting)

    def _build(self, epoch: int) -> DataLoader[Any]:
        config = self._config
        context = worker_context()
        if context.get_start_method() == "forkserver":
            # the server imports these once; each worker forked from it starts in milliseconds
            task_module = type(self._dataset.task).__module__
            context.set_forkserver_preload(["torch", __name__, task_module])
        return DataLoader(
            self._dataset,
            batch_size=None,
            sampler=self._sampler,
            num_workers=config.num_workers,
            collate_fn=_as_is,
            pin_memory=self.pin_memory(),
            prefetch_factor=config.prefetch_factor,
            persistent_workers=True,
            worker_init_fn=functools.partial(_init_worker, config.seed, epoch, self.rank),
            # each iter() draws a base seed: from this generator, not the global RNG the model uses
            generator=torch.Generator().manual_seed(_derived_seed(config.seed, epoch, self.rank)),
            multiprocessing_context=context,
        )

    def epoch(self, epoch: int, start: int, count: int) -> Iterator[Any]:
        """Batches ``start .. count - 1`` of ``epoch``, in order; a failed batch raises
        :class:`DataError` naming it."""
        self._sampler.epoch, self._sampler.start, self._sampler.count = epoch, start, count
        if self._loader is None:
            self._loader = self._build(epoch)
        self._iterator = iter(self._loader)
        return self._checked(self._iterator, epoch, start)

    def _checked(self, iterator: Iterator[Any], epoch: int, start: int) -> Iterator[Any]:
        index = start
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            except (RuntimeError, ConnectionError, EOFError) as error:
                # a worker died (killed, out of memory): the loader says so, or its pipe breaks
                if isinstance(error, RuntimeError) and "DataLoader" not in str(error):
                    raise
                raise DataError(
                    f"task {self.task_name}: batch {index} of epoch {epoch} (rank {self.rank}) "
                    f"was not delivered because a DataLoader worker stopped ({_one_line(error)}); "
                    "check the worker's memory, or set run.num_workers=0 to load in the training "
                    "process."
                ) from None
            if isinstance(batch, _BatchFailure):
                raise DataError(
                    f"task {self.task_name}: batch {batch.index} of epoch {batch.epoch} "
                    f"(rank {self.rank}) could not be loaded in a DataLoader worker: "
                    f"{batch.reason}.",
                    batch.path,
                )
            index += 1
            yield batch

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        iterator, self._iterator, self._loader = self._iterator, None, None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
