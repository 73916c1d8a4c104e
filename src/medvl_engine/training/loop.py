"""The one training loop shared by every task (LIMIT, TopKSigLIP): :class:`Trainer`, :func:`train`.

AdamW with a warmup + cosine schedule, bf16 autocast on CUDA, gradient accumulation and
clipping, a guard that skips steps with a non-finite loss or gradient, atomic checkpoints with
exact resume (the metrics log is cut back to the checkpoint, so no step is logged twice),
DistributedDataParallel under torchrun, JSONL metrics and a progress bar. The task contract is
in :mod:`medvl_engine.training.task`.

A :class:`Trainer` is one run in one process (one rank under torchrun): :meth:`~Trainer.resume`
continues a checkpointed run, :meth:`~Trainer.step` is one optimiser step,
:meth:`~Trainer.evaluate` scores the model, :meth:`~Trainer.checkpoint` saves what an exact
resume needs, :meth:`~Trainer.fit` runs the epochs with them. :func:`train` joins the process
group, fits one Trainer and leaves the group.

Batches come from ``task.train_batches`` in this process, or, with ``run.num_workers > 0``
and a task with ``batch_at``, from DataLoader worker processes
(:mod:`medvl_engine.training._batches`); both give the same batches and the same resume. Step
records in metrics.jsonl carry ``data_s`` (seconds this rank waited for its micro-batches,
device copy included) and ``step_s`` (the whole step). With ``run.ema_decay`` a moving average
of the weights (:mod:`medvl_engine.training._weight_average`) is what is evaluated, chosen as
``best/`` and saved as ``final/``. A task that splits its evaluation is scored on every rank at
once, any other on rank 0 (:mod:`medvl_engine.training._evaluation`). Collectives time out
after ``run.dist_timeout_minutes``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from medvl_engine.common.write_errors import reporting_write_errors
from medvl_engine.errors import ConfigError, DataError, MedVLError
from medvl_engine.training._batches import WorkerBatches, uses_workers
from medvl_engine.training._evaluation import evaluation_metrics, improved_choice
from medvl_engine.training._metrics_log import Progress, RunOutputs
from medvl_engine.training._metrics_trim import metrics_size, trim_metrics_log
from medvl_engine.training._weight_average import WeightAverage
from medvl_engine.training.checkpoint import (
    CHECKPOINT_NAME,
    LoopState,
    capture_rng_state,
    load_checkpoint,
    resolved_config,
    restore_rng_state,
    resume_path,
    save_checkpoint,
)
from medvl_engine.training.config import RunConfig
from medvl_engine.training.distributed import (
    DistInfo,
    barrier,
    gather_objects,
    init_distributed,
    mean_over_ranks,
    shutdown_distributed,
    wrap_ddp,
)
from medvl_engine.training.optim import autocast, lr_factor, lr_schedule, optimizer_groups
from medvl_engine.training.task import ShardedEvaluation, Task, move_to_device, unwrap_model

__all__ = [
    "Trainer",
    "train",
    "TrainingDivergedError",
    "lr_factor",
    "CHECKPOINT_NAME",
    "METRICS_NAME",
]

METRICS_NAME = "metrics.jsonl"

_optimizer_groups = optimizer_groups  # the name earlier code and tests import from here


class TrainingDivergedError(MedVLError):
    """Too many optimiser steps had a non-finite loss or gradient."""


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """One training run of ``task`` under ``config`` in this process (one rank of ``info``).

    Building it creates the run folder (rank 0), seeds python, NumPy and torch with
    ``run.seed``, builds the model on the device, the AdamW optimiser over the task's
    parameter groups, the warmup + cosine schedule (:func:`lr_factor`), the weight average
    (``run.ema_decay``) and, with more than one rank, the DistributedDataParallel wrapper.
    Call :meth:`resume` once before the first :meth:`step` (:meth:`fit` does). The metrics log
    and progress bar open on first use and DataLoader workers start in :meth:`fit`;
    :meth:`close` (called by :meth:`fit`, or on leaving a ``with`` block) releases them.
    """

    def __init__(self, task: Task, config: RunConfig, info: DistInfo) -> None:
        self.task, self.config, self.info, self.device = task, config, info, info.device
        self.out_dir = Path(config.out_dir)
        self.checkpoint_path = self.out_dir / CHECKPOINT_NAME
        self.metrics_path = self.out_dir / METRICS_NAME
        if info.is_main:  # read-only, a file there: a sentence
            with reporting_write_errors("run folder", self.out_dir):
                self.out_dir.mkdir(parents=True, exist_ok=True)
        _seed_everything(config.seed)
        self.model = task.build_model().to(self.device)
        self.optimizer = self._build_optimizer()
        self.batches_per_epoch = [
            task.num_batches(epoch, info.rank, info.world_size) for epoch in range(config.epochs)
        ]
        self.total_steps = self._count_steps()
        self.scheduler = lr_schedule(self.optimizer, self.total_steps, config)
        self.average = (
            WeightAverage(self.model, config.ema_decay) if config.ema_decay is not None else None
        )
        self.train_model = wrap_ddp(self.model, info, config.ddp_find_unused_parameters)
        self.sharded = task if isinstance(task, ShardedEvaluation) else None
        self.state = LoopState()
        self.resolved_config = resolved_config(task, config)  # as the run started
        self.losses: list[float] = []
        self.evaluations: list[dict[str, Any]] = []
        self.last_eval_step = -1
        self.stopped_early = False
        description = f"train {task.name}"
        self.outputs = RunOutputs(self.metrics_path, info.is_main, config.progress, description)
        self._workers: WorkerBatches | None = None

    def _build_optimizer(self) -> torch.optim.Optimizer:
        """AdamW over :func:`optimizer_groups`; a task with nothing to train is a ConfigError."""
        groups = optimizer_groups(self.task, self.model, self.config.lr)
        self.params = [p for group in groups for p in group["params"]]
        if not self.params:
            raise ConfigError(
                f"task {self.task.name} has no trainable parameters; nothing to optimise."
            )
        return torch.optim.AdamW(groups, lr=self.config.lr, weight_decay=self.config.weight_decay)

    def _count_steps(self) -> int:
        """Optimiser steps of the run: ceil(batches / grad_accum) per epoch, capped by max_steps."""
        config = self.config
        total = sum(-(-n // config.grad_accum) for n in self.batches_per_epoch)
        if config.max_steps is not None:
            total = min(total, config.max_steps)
        if total == 0 and config.epochs > 0:  # epochs = 0: evaluate and save, no step
            raise DataError(
                f"task {self.task.name} has no training batches; check the training split."
            )
        return total

    def resume(self) -> bool:
        """Continue the run that ``run.resume`` names (``auto``: this run folder's checkpoint,
        when there is one); returns whether a checkpoint was loaded.

        Restores the weights, optimiser, schedule, loop position and counters and the weight
        average; cuts metrics.jsonl back to what it held when the checkpoint was saved (no step
        or evaluation is logged twice); restores this rank's RNG state last, so the following
        steps draw exactly what the uninterrupted run drew. Call it before the first step.
        """
        path = resume_path(self.config.resume, self.out_dir)
        if path is None:
            return False
        payload = load_checkpoint(path)
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.state = LoopState(**payload["loop"])
        self.last_eval_step = self.state.step
        if self.average is not None and "ema" not in payload:
            raise ConfigError(
                f"checkpoint {path} holds no weight average but run.ema_decay is set; "
                "resume with the settings it was written with, or start a new run."
            )
        if self.average is not None:
            self.average.load_state_dict(payload["ema"])
        if self.info.is_main:
            trim_metrics_log(self.metrics_path, self.state.step, self.state.metrics_bytes)
        rng_states = payload["rng"]
        same_world = len(rng_states) == self.info.world_size
        restore_rng_state(rng_states[self.info.rank] if same_world else rng_states[0])
        return True

    def step(self, micro_batches: Iterable[Any], count: int | None = None) -> dict[str, Any]:
        """One optimiser step over ``count`` micro-batches drawn from ``micro_batches`` (all of
        them when ``count`` is None); returns the step record.

        Each micro-batch is moved to the device, its ``loss`` computed (bf16 autocast when
        ``run.amp`` asks for it) and back-propagated divided by ``count``, so the gradient is
        the mean over the micro-batches (under DDP ranks synchronise on the last one only).
        The gradient norm is clipped to ``run.grad_clip``; when the loss or that norm is not
        finite on some rank the step is skipped (weights unchanged) and counted. The schedule
        advances either way. The record (``step``, ``epoch``, ``lr`` of the next step,
        ``grad_norm``, ``skipped``, ``data_s``, ``step_s``, the mean of each loss term, and
        ``loss`` averaged over ranks) goes to metrics.jsonl every ``run.log_every`` steps and
        whenever a step is skipped. Raises :class:`TrainingDivergedError` once
        ``run.max_bad_steps`` steps were skipped.
        """
        if count is None:
            micro_batches = list(micro_batches)
            count = len(micro_batches)
        if count < 1:
            raise ValueError("an optimiser step needs at least one micro-batch")
        progress = self._progress_bar()
        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        sums, data_seconds = self._accumulate(iter(micro_batches), count)
        clip = self.config.grad_clip if self.config.grad_clip is not None else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, clip))
        loss_value = sums["loss"] if math.isfinite(grad_norm) else float("nan")
        finite, mean_loss = mean_over_ranks(loss_value, self.info, self.device)
        self._apply_gradients(finite)
        step_seconds = time.perf_counter() - started
        self.state.step += 1
        self.state.batch_in_epoch += count
        self.losses.append(mean_loss if finite else float("nan"))
        record = {
            "event": "step",
            "step": self.state.step,
            "epoch": self.state.epoch,
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": grad_norm,
            "skipped": not finite,
            "data_s": round(data_seconds, 6),
            "step_s": round(step_seconds, 6),
            **sums,
            "loss": mean_loss,
        }
        if self.state.step % self.config.log_every == 0 or not finite:
            self.outputs.log().write(record)
        progress.update(mean_loss)
        if not finite:
            self._check_divergence()
        return record

    def _accumulate(self, batches: Iterator[Any], count: int) -> tuple[dict[str, float], float]:
        """Back-propagate ``count`` micro-batches; (mean of each loss term, seconds spent
        waiting for the batches, device copy included)."""
        sums: dict[str, float] = {}
        data_seconds = 0.0
        for micro in range(count):
            fetch_started = time.perf_counter()
            batch = move_to_device(self._next_batch(batches, micro), self.device)
            data_seconds += time.perf_counter() - fetch_started
            terms = self._backward(batch, count, last=micro == count - 1)
            for key, value in terms.items():
                sums[key] = sums.get(key, 0.0) + float(value.detach().float()) / count
        return sums, data_seconds

    def _next_batch(self, batches: Iterator[Any], micro: int) -> Any:
        try:
            return next(batches)
        except StopIteration:
            raise DataError(
                f"task {self.task.name} yielded fewer batches in epoch {self.state.epoch} than "
                "num_batches() announced (ran out at batch "
                f"{self.state.batch_in_epoch + micro}); make the two agree."
            ) from None

    def _backward(self, batch: Any, count: int, last: bool) -> dict[str, torch.Tensor]:
        """The task's loss terms of one micro-batch, ``loss / count`` back-propagated (DDP
        synchronises gradients only when ``last``)."""
        model = self.train_model
        sync: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        if isinstance(model, nn.parallel.DistributedDataParallel) and not last:
            sync = model.no_sync()
        with sync:
            with autocast(self.config, self.device):
                terms = self.task.compute_losses(self.train_model, batch)
            if "loss" not in terms:
                raise ConfigError(
                    f"task {self.task.name}: compute_losses must return a 'loss' entry."
                )
            (terms["loss"].float() / count).backward()
        return terms

    def _apply_gradients(self, finite: bool) -> None:
        """Optimiser step and weight average when ``finite``, else drop the gradients and count
        a bad step; the schedule advances either way."""
        if finite:
            self.optimizer.step()
            if self.average is not None:
                self.average.update(self.state.step + 1)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            self.state.bad_steps += 1
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler")
            self.scheduler.step()

    def _check_divergence(self) -> None:
        if self.state.bad_steps < max(self.config.max_bad_steps, 1):
            return
        state = self.state
        self.outputs.log().write(
            {"event": "diverged", "step": state.step, "bad_steps": state.bad_steps}
        )
        raise TrainingDivergedError(
            f"training of {self.task.name} stopped at step {state.step}: "
            f"{state.bad_steps} steps had a non-finite loss or gradient "
            f"(run.max_bad_steps={self.config.max_bad_steps}); lower run.lr, set "
            "run.grad_clip or check the input features."
        )

    def evaluated_model(self) -> nn.Module:
        """The weights evaluated and saved: the moving average when there is one."""
        return self.average.model if self.average is not None else unwrap_model(self.train_model)

    def evaluate(self, epoch: int | None = None) -> dict[str, float] | None:
        """Score :meth:`evaluated_model` and record the result under ``epoch`` (default: the
        epoch the loop stands in); returns the metrics, None on a rank that did not score.

        Every rank scores its shard when the task splits its evaluation (the parts are
        gathered, no barrier), else rank 0 scores alone while the others wait at a barrier.
        The model is in eval mode under ``torch.no_grad`` and the global RNG state is left as
        it was. Rank 0 logs an ``eval`` record and, when ``run.select_metric`` beats the best
        value so far (``run.select_mode``), saves the model to ``best/``.
        """
        epoch = self.state.epoch if epoch is None else epoch
        self.last_eval_step = self.state.step
        back_to_train = self.average is None  # the average is never trained
        model = self.evaluated_model()
        metrics = evaluation_metrics(self.task, model, self.info, self.config, back_to_train)
        if self.info.is_main and metrics is not None:
            self._record_evaluation(epoch, metrics)
        if self.sharded is None:
            barrier(self.info)  # the other ranks waited here while rank 0 evaluated
        return metrics

    def _record_evaluation(self, epoch: int, metrics: dict[str, float]) -> None:
        record = {"epoch": epoch, "step": self.state.step, **metrics}
        self.evaluations.append(record)
        self.outputs.log().write({"event": "eval", **record})
        chosen = improved_choice(metrics, self.state.best_value, self.config)
        if chosen is not None:
            self.state.best_value, self.state.best_epoch = chosen, epoch
            if hasattr(self.task, "save_pretrained"):
                self.task.save_pretrained(self.evaluated_model(), self.out_dir / "best")

    def checkpoint(self) -> None:
        """Save what an exact resume needs to checkpoint.pt, atomically, on rank 0: the
        unwrapped weights, optimiser and schedule state, loop position and counters, every
        rank's RNG state, the weight average and the resolved config. Every rank must call it
        (the RNG states are gathered, then the ranks meet at a barrier)."""
        rng_states = gather_objects(capture_rng_state())
        if self.info.is_main:
            self.state.metrics_bytes = metrics_size(self.metrics_path)
            contents = {
                "model": unwrap_model(self.train_model).state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "loop": dataclasses.asdict(self.state),
                "rng": rng_states,
                "config": self.resolved_config,
            }
            if self.average is not None:
                contents["ema"] = self.average.state_dict()
            save_checkpoint(self.checkpoint_path, contents)
        barrier(self.info)

    def fit(self) -> dict[str, Any]:
        """Resume when asked, train the remaining epochs, finish, close; returns
        :meth:`summary`.

        Each epoch runs optimiser steps over its micro-batches in groups of ``run.grad_accum``
        (a checkpoint every ``run.ckpt_every`` steps), then evaluates and checkpoints.
        ``run.max_steps`` cuts training short (still evaluated and checkpointed);
        ``run.stop_at_step`` stops after that step with a checkpoint only, as an interrupted
        run would. Rank 0 then saves the evaluated model to ``final/`` (not after a stop).
        """
        self.resume()
        started = time.time()
        try:
            self.outputs.log()  # opened once resume has cut it back
            self._progress_bar()
            if uses_workers(self.task, self.config):
                self._workers = WorkerBatches(
                    self.task, self.config, self.info.rank, self.info.world_size, self.device
                )
            self._train_epochs()
            self._finish()
        finally:
            self.close()
        return self.summary(time.time() - started)

    def _train_epochs(self) -> None:
        for epoch in range(self.state.epoch, self.config.epochs):
            if not self._train_epoch(epoch):
                return
            self.state.epoch, self.state.batch_in_epoch = epoch + 1, 0
            self.evaluate(epoch)
            self.checkpoint()

    def _train_epoch(self, epoch: int) -> bool:
        """Optimiser steps over ``epoch`` from the saved position on; whether the epoch ran to
        its end (not cut by ``run.max_steps`` or ``run.stop_at_step``)."""
        count = self.batches_per_epoch[epoch]
        if epoch != self.state.epoch:
            self.state.epoch, self.state.batch_in_epoch = epoch, 0
        self.train_model.train()
        batches = self._epoch_batches(epoch, self.state.batch_in_epoch, count)
        while self.state.batch_in_epoch < count and self.state.step < self.total_steps:
            self.step(batches, min(self.config.grad_accum, count - self.state.batch_in_epoch))
            if self.config.ckpt_every and self.state.step % self.config.ckpt_every == 0:
                self.checkpoint()
            if self.config.stop_at_step is not None and self.state.step >= self.config.stop_at_step:
                self.stopped_early = True
                return False
        return self.state.batch_in_epoch >= count

    def _epoch_batches(self, epoch: int, start: int, count: int) -> Iterator[Any]:
        """This rank's micro-batches ``start .. count - 1`` of ``epoch``."""
        if self._workers is not None:
            return self._workers.epoch(epoch, start, count)
        return iter(self.task.train_batches(epoch, self.info.rank, self.info.world_size, start))

    def _finish(self) -> None:
        """Checkpoint a stopped run; else evaluate the last steps (unless just evaluated),
        checkpoint, and save ``final/`` on rank 0."""
        if self.stopped_early:
            self.checkpoint()
        elif self.last_eval_step != self.state.step:
            self.evaluate()
            self.checkpoint()
        if not self.stopped_early and self.info.is_main and hasattr(self.task, "save_pretrained"):
            self.task.save_pretrained(self.evaluated_model(), self.out_dir / "final")
        barrier(self.info)

    def summary(self, seconds: float) -> dict[str, Any]:
        """What :func:`train` returns (keys listed there)."""
        return {
            "steps": self.state.step,
            "losses": self.losses,
            "bad_steps": self.state.bad_steps,
            "evaluations": self.evaluations,
            "best_epoch": self.state.best_epoch,
            "best_value": self.state.best_value,
            "stopped_early": self.stopped_early,
            "seconds": seconds,
            "out_dir": str(self.out_dir),
            "checkpoint": str(self.checkpoint_path),
            "rank": self.info.rank,
            "world_size": self.info.world_size,
        }

    def _progress_bar(self) -> Progress:
        return self.outputs.progress(self.total_steps, self.state.step)

    def close(self) -> None:
        """Stop DataLoader workers, close the progress bar and the metrics log (idempotent)."""
        workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()
        self.outputs.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def train(task: Task, config: RunConfig) -> dict[str, Any]:
    """Train ``task`` with ``config`` (a :class:`Trainer` fitted in this process); returns a
    summary dict.

    Summary keys: ``steps`` (optimiser steps done), ``losses`` (the mean loss of each
    step run in this call, in order, averaged over ranks), ``bad_steps``,
    ``evaluations`` (list of ``{"epoch", "step", **metrics}``), ``best_epoch``,
    ``best_value``, ``stopped_early``, ``seconds``, ``out_dir``, ``checkpoint``, ``rank``,
    ``world_size``. Raises :class:`TrainingDivergedError` after ``config.max_bad_steps``
    skipped steps.
    """
    info = init_distributed(config.device, config.dist_timeout_minutes)
    try:
        return Trainer(task, config, info).fit()
    finally:
        shutdown_distributed(info)
