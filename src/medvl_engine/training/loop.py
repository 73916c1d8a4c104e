"""The one training loop shared by every task (LIMIT, TopKSigLIP).

AdamW with a warmup + cosine schedule, bf16 autocast on CUDA, gradient accumulation
and clipping, a guard that skips steps with a non-finite loss or gradient, atomic
checkpoints with exact resume (the metrics log is cut back to the checkpoint, so no step
is logged twice), DistributedDataParallel under torchrun, JSONL metrics and a progress bar.
The task contract is documented in :mod:`medvl_engine.training.task`.

Data: batches come from ``task.train_batches`` in this process, or, when ``run.num_workers > 0``
and the task has ``batch_at``, from DataLoader worker processes with prefetch and pinned memory
(:mod:`medvl_engine.training._batches`); both give the same batches and the same resume. Each
step record in metrics.jsonl carries ``data_s`` (seconds this rank waited for its micro-batches,
device copy included) and ``step_s`` (seconds of the whole optimiser step, data included).

Weight averaging: with ``run.ema_decay`` set, a moving average of the weights
(:mod:`medvl_engine.training._weight_average`) follows every optimiser step and is what is
evaluated, chosen as ``best/`` and saved as ``final/``; checkpoints carry it for resume.

Evaluation: a task with ``evaluate_shard(model, rank, world_size) -> part`` (a picklable
result of this rank's shard of the eval set) and ``merge_evaluation(parts) -> metrics``
(``parts`` in rank order) is evaluated on every rank at once and its parts gathered with
a collective, never a barrier; a task with only ``evaluate(model)`` is evaluated on rank 0
while the others wait. Collectives time out after ``run.dist_timeout_minutes``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from medvl_engine.common.write_errors import reporting_write_errors
from medvl_engine.errors import ConfigError, DataError, MedVLError
from medvl_engine.training._batches import WorkerBatches, uses_workers
from medvl_engine.training._metrics_log import MetricsLog, Progress
from medvl_engine.training._metrics_trim import metrics_size, trim_metrics_log
from medvl_engine.training._weight_average import WeightAverage
from medvl_engine.training.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from medvl_engine.training.config import RunConfig
from medvl_engine.training.distributed import (
    DistInfo,
    barrier,
    gather_objects,
    init_distributed,
    shutdown_distributed,
)
from medvl_engine.training.task import ShardedEvaluation, Task, move_to_device, unwrap_model

__all__ = ["train", "TrainingDivergedError", "lr_factor", "CHECKPOINT_NAME", "METRICS_NAME"]

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.jsonl"


class TrainingDivergedError(MedVLError):
    """Too many optimiser steps had a non-finite loss or gradient."""


def lr_factor(
    step: int, total_steps: int, warmup_steps: int, schedule: str, min_ratio: float
) -> float:
    """Learning-rate multiplier before optimiser step ``step`` (0-based).

    Linear warmup ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps,
    then ``min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2`` with ``t`` going from
    0 to 1 over the remaining steps (cosine), or 1 (constant).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / decay_steps, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _autocast(config: RunConfig, device: torch.device) -> contextlib.AbstractContextManager[object]:
    use_bf16 = config.amp == "bf16" or (config.amp == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def _gather_rng(info: DistInfo) -> list[dict[str, Any]]:
    state = capture_rng_state()
    if not info.distributed:
        return [state]
    gathered: list[Any] = [None] * info.world_size
    dist.all_gather_object(gathered, state)
    return gathered


def _all_ranks_finite(value: float, info: DistInfo, device: torch.device) -> tuple[bool, float]:
    """Mean of ``value`` over ranks, and whether it is finite everywhere."""
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


@dataclasses.dataclass
class _LoopState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    bad_steps: int = 0
    best_value: float | None = None
    best_epoch: int | None = None
    metrics_bytes: int | None = None  # size of metrics.jsonl when the checkpoint was saved


def _resolved_config(task: Task, config: RunConfig) -> dict[str, Any]:
    task_config = getattr(task, "config", None)
    task_values = (
        dataclasses.asdict(task_config)
        if dataclasses.is_dataclass(task_config) and not isinstance(task_config, type)
        else {}
    )
    return {"task_name": task.name, "run": dataclasses.asdict(config), "task": task_values}


def _resume_path(config: RunConfig, out_dir: Path) -> Path | None:
    if config.resume is None or config.resume == "":
        return None
    if config.resume == "auto":
        candidate = out_dir / CHECKPOINT_NAME
        return candidate if candidate.is_file() else None
    return Path(config.resume)


def _next_batch(batches: Iterator[Any], task: Task, epoch: int, index: int) -> Any:
    try:
        return next(batches)
    except StopIteration:
        raise DataError(
            f"task {task.name} yielded fewer batches in epoch {epoch} than num_batches() "
            f"announced (ran out at batch {index}); make the two agree."
        ) from None


def _optimizer_groups(task: Any, model: nn.Module, lr: float) -> list[dict[str, Any]]:
    """AdamW parameter groups: the task's ``optimizer_groups`` (each with an ``lr_scale``),
    else its ``trainable_parameters``, else every parameter that requires a gradient."""
    if hasattr(task, "optimizer_groups"):
        groups = [
            {
                "params": [p for p in group["params"] if p.requires_grad],
                "lr": lr * float(group.get("lr_scale", 1.0)),
            }
            for group in task.optimizer_groups(model)
        ]
        return [group for group in groups if group["params"]]
    if hasattr(task, "trainable_parameters"):
        return [{"params": [p for p in task.trainable_parameters(model) if p.requires_grad]}]
    return [{"params": [p for p in model.parameters() if p.requires_grad]}]


def train(task: Task, config: RunConfig) -> dict[str, Any]:
    """Train ``task`` with ``config``; returns a summary dict.

    Summary keys: ``steps`` (optimiser steps done), ``losses`` (the mean loss of each
    step run in this call, in order, averaged over ranks), ``bad_steps``,
    ``evaluations`` (list of ``{"epoch", "step", **metrics}``), ``best_epoch``,
    ``best_value``, ``stopped_early``, ``out_dir``, ``checkpoint``.
    Raises :class:`TrainingDivergedError` after ``config.max_bad_steps`` skipped steps.
    """
    info = init_distributed(config.device, config.dist_timeout_minutes)
    try:
        return _train(task, config, info)
    finally:
        shutdown_distributed(info)


def _train(task: Task, config: RunConfig, info: DistInfo) -> dict[str, Any]:
    device = info.device
    out_dir = Path(config.out_dir)
    if info.is_main:
        with reporting_write_errors("run folder", out_dir):  # read-only, a file there: a sentence
            out_dir.mkdir(parents=True, exist_ok=True)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)

    model = task.build_model().to(device)
    groups = _optimizer_groups(task, model, config.lr)
    params = [p for group in groups for p in group["params"]]
    if not params:
        raise ConfigError(f"task {task.name} has no trainable parameters; nothing to optimise.")
    optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)

    batches_per_epoch = [
        task.num_batches(epoch, info.rank, info.world_size) for epoch in range(config.epochs)
    ]
    total_steps = sum(-(-n // config.grad_accum) for n in batches_per_epoch)
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    if total_steps == 0 and config.epochs > 0:  # epochs = 0: evaluate and save, no step
        raise DataError(f"task {task.name} has no training batches; check the training split.")

    def schedule(step: int) -> float:
        return lr_factor(
            step, total_steps, config.warmup_steps, config.schedule, config.min_lr_ratio
        )

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    state = _LoopState()
    resolved = _resolved_config(task, config)

    resume_from = _resume_path(config, out_dir)
    rng_to_restore = None
    if resume_from is not None:
        payload = load_checkpoint(resume_from)
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        scheduler.load_state_dict(payload["scheduler"])
        state = _LoopState(**payload["loop"])
        rng_states = payload["rng"]
        rng_to_restore = (
            rng_states[info.rank] if len(rng_states) == info.world_size else rng_states[0]
        )

    average = WeightAverage(model, config.ema_decay) if config.ema_decay is not None else None
    if average is not None and resume_from is not None:
        if "ema" not in payload:
            raise ConfigError(
                f"checkpoint {resume_from} holds no weight average but run.ema_decay is set; "
                "resume with the settings it was written with, or start a new run."
            )
        average.load_state_dict(payload["ema"])

    train_model: nn.Module = model
    if info.distributed:
        train_model = nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=config.ddp_find_unused_parameters,
        )

    metrics_path = out_dir / METRICS_NAME
    if resume_from is not None and info.is_main:
        trim_metrics_log(metrics_path, state.step, state.metrics_bytes)
    log = MetricsLog(metrics_path, info.is_main)
    progress = Progress(
        total_steps, state.step, config.progress and info.is_main, f"train {task.name}"
    )
    checkpoint_path = out_dir / CHECKPOINT_NAME
    losses: list[float] = []
    evaluations: list[dict[str, Any]] = []
    last_eval_step = -1 if resume_from is None else state.step

    def write_checkpoint() -> None:
        rng_states = _gather_rng(info)
        if info.is_main:
            state.metrics_bytes = metrics_size(metrics_path)
            contents = {
                "model": unwrap_model(train_model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "loop": dataclasses.asdict(state),
                "rng": rng_states,
                "config": resolved,
            }
            if average is not None:
                contents["ema"] = average.state_dict()
            save_checkpoint(checkpoint_path, contents)
        barrier(info)

    def evaluated_model() -> nn.Module:
        """The weights evaluated and saved: the moving average when there is one."""
        return average.model if average is not None else unwrap_model(train_model)

    sharded = task if isinstance(task, ShardedEvaluation) else None

    def evaluate_metrics() -> dict[str, float] | None:
        """This evaluation's metrics: every rank scores its shard when the task can split
        its evaluation (results gathered, no barrier), else rank 0 alone (others get None)."""
        if sharded is None and not info.is_main:
            return None
        saved_rng = capture_rng_state()
        inner = evaluated_model()
        inner.eval()
        with torch.no_grad(), _autocast(config, device):
            if sharded is not None:
                part = sharded.evaluate_shard(inner, info.rank, info.world_size)
            else:
                metrics = {k: float(v) for k, v in task.evaluate(inner).items()}
        if average is None:
            inner.train()
        restore_rng_state(saved_rng)
        if sharded is not None:
            parts = gather_objects(part)
            metrics = {k: float(v) for k, v in sharded.merge_evaluation(parts).items()}
        return metrics

    def run_evaluation(epoch: int) -> None:
        nonlocal last_eval_step
        last_eval_step = state.step
        metrics = evaluate_metrics()
        if info.is_main and metrics is not None:
            inner = evaluated_model()
            record = {"epoch": epoch, "step": state.step, **metrics}
            evaluations.append(record)
            log.write({"event": "eval", **record})
            chosen = metrics.get(config.select_metric) if config.select_metric else None
            better = chosen is not None and (
                state.best_value is None
                or (
                    chosen > state.best_value
                    if config.select_mode == "max"
                    else chosen < state.best_value
                )
            )
            if better:
                state.best_value, state.best_epoch = chosen, epoch
                if hasattr(task, "save_pretrained"):
                    task.save_pretrained(inner, out_dir / "best")
        if sharded is None:
            barrier(info)  # the other ranks waited here while rank 0 evaluated

    if rng_to_restore is not None:
        restore_rng_state(rng_to_restore)

    stopped_early = False
    started = time.time()
    workers: WorkerBatches | None = None
    try:
        if uses_workers(task, config):
            workers = WorkerBatches(task, config, info.rank, info.world_size, device)
        for epoch in range(state.epoch, config.epochs):
            count = batches_per_epoch[epoch]
            index = state.batch_in_epoch if epoch == state.epoch else 0
            state.epoch, state.batch_in_epoch = epoch, index
            train_model.train()
            if workers is not None:
                batches = workers.epoch(epoch, index, count)
            else:
                batches = iter(task.train_batches(epoch, info.rank, info.world_size, index))
            while index < count and state.step < total_steps:
                step_started = time.perf_counter()
                data_seconds = 0.0
                group = min(config.grad_accum, count - index)
                optimizer.zero_grad(set_to_none=True)
                sums: dict[str, float] = {}
                for micro in range(group):
                    fetch_started = time.perf_counter()
                    batch = move_to_device(_next_batch(batches, task, epoch, index + micro), device)
                    data_seconds += time.perf_counter() - fetch_started
                    last_micro = micro == group - 1
                    sync_context = (
                        train_model.no_sync()
                        if isinstance(train_model, nn.parallel.DistributedDataParallel)
                        and not last_micro
                        else contextlib.nullcontext()
                    )
                    with sync_context:
                        with _autocast(config, device):
                            terms = task.compute_losses(train_model, batch)
                        if "loss" not in terms:
                            raise ConfigError(
                                f"task {task.name}: compute_losses must return a 'loss' entry."
                            )
                        (terms["loss"].float() / group).backward()
                    for key, value in terms.items():
                        sums[key] = sums.get(key, 0.0) + float(value.detach().float()) / group
                index += group
                clip = config.grad_clip if config.grad_clip is not None else float("inf")
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
                loss_value = sums["loss"] if math.isfinite(grad_norm) else float("nan")
                finite, mean_loss = _all_ranks_finite(loss_value, info, device)
                if finite:
                    optimizer.step()
                    if average is not None:
                        average.update(state.step + 1)
                else:
                    optimizer.zero_grad(set_to_none=True)
                    state.bad_steps += 1
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler")
                    scheduler.step()
                step_seconds = time.perf_counter() - step_started
                state.step += 1
                state.batch_in_epoch = index
                losses.append(mean_loss if finite else float("nan"))
                if state.step % config.log_every == 0 or not finite:
                    log.write(
                        {
                            "event": "step",
                            "step": state.step,
                            "epoch": epoch,
                            "lr": optimizer.param_groups[0]["lr"],
                            "grad_norm": grad_norm,
                            "skipped": not finite,
                            "data_s": round(data_seconds, 6),
                            "step_s": round(step_seconds, 6),
                            **{key: value for key, value in sums.items()},
                            "loss": mean_loss,
                        }
                    )
                progress.update(mean_loss)
                if not finite and state.bad_steps >= max(config.max_bad_steps, 1):
                    log.write(
                        {"event": "diverged", "step": state.step, "bad_steps": state.bad_steps}
                    )
                    raise TrainingDivergedError(
                        f"training of {task.name} stopped at step {state.step}: "
                        f"{state.bad_steps} steps had a non-finite loss or gradient "
                        f"(run.max_bad_steps={config.max_bad_steps}); lower run.lr, set "
                        "run.grad_clip or check the input features."
                    )
                if config.ckpt_every and state.step % config.ckpt_every == 0:
                    write_checkpoint()
                if config.stop_at_step is not None and state.step >= config.stop_at_step:
                    stopped_early = True
                    break
            if stopped_early or state.step >= total_steps and index < count:
                break
            state.epoch, state.batch_in_epoch = epoch + 1, 0
            run_evaluation(epoch)
            write_checkpoint()
        if stopped_early:
            write_checkpoint()
        elif last_eval_step != state.step:
            run_evaluation(state.epoch)
            write_checkpoint()
        if not stopped_early and info.is_main and hasattr(task, "save_pretrained"):
            task.save_pretrained(evaluated_model(), out_dir / "final")
        barrier(info)
    finally:
        if workers is not None:
            workers.close()
        progress.close()
        log.close()

    return {
        "steps": state.step,
        "losses": losses,
        "bad_steps": state.bad_steps,
        "evaluations": evaluations,
        "best_epoch": state.best_epoch,
        "best_value": state.best_value,
        "stopped_early": stopped_early,
        "seconds": time.time() - started,
        "out_dir": str(out_dir),
        "checkpoint": str(checkpoint_path),
        "rank": info.rank,
        "world_size": info.world_size,
    }
