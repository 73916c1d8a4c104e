"""Atomic checkpoints holding everything an exact resume needs.

A checkpoint is one ``torch.save`` file with: the unwrapped model state dict, the
optimiser and scheduler state, the loop position (step, epoch, batch index within
the epoch), the RNG states of python, numpy and torch (CPU and CUDA), counters, and
the resolved configuration. Only plain Python values and tensors are stored so that
it loads with ``torch.load(weights_only=True)``. A run keeps its checkpoint in its run folder
as :data:`CHECKPOINT_NAME`; :class:`LoopState` is the loop position saved in it.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from medvl_engine.common.atomic import atomic_write_stream
from medvl_engine.common.write_errors import reporting_write_errors
from medvl_engine.errors import CorruptFileError
from medvl_engine.training.config import RunConfig, config_values

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "capture_rng_state",
    "restore_rng_state",
    "LoopState",
    "resume_path",
    "resolved_config",
    "CHECKPOINT_NAME",
]

CHECKPOINT_NAME = "checkpoint.pt"


@dataclasses.dataclass
class LoopState:
    """Where a run stands; saved in every checkpoint as ``loop`` (``dataclasses.asdict``)."""

    step: int = 0  # optimiser steps done
    epoch: int = 0  # the epoch in progress (the next one once an epoch has ended)
    batch_in_epoch: int = 0  # micro-batches of that epoch already trained on
    bad_steps: int = 0  # steps skipped for a non-finite loss or gradient
    best_value: float | None = None  # best run.select_metric so far
    best_epoch: int | None = None
    metrics_bytes: int | None = None  # size of metrics.jsonl when the checkpoint was saved


def resolved_config(task: Any, config: RunConfig) -> dict[str, Any]:
    """The configuration a checkpoint records: ``task_name``, the ``run`` settings and the
    ``task`` dataclass's values, grouped by its sections when its class declares them
    (:func:`~medvl_engine.training.config.config_values`; empty without a dataclass config)."""
    task_config = getattr(task, "config", None)
    task_values = (
        config_values(task_config)
        if dataclasses.is_dataclass(task_config) and not isinstance(task_config, type)
        else {}
    )
    return {"task_name": task.name, "run": dataclasses.asdict(config), "task": task_values}


def resume_path(resume: str | None, out_dir: Path) -> Path | None:
    """The checkpoint a run continues from: ``run.resume`` as a path, for ``auto`` the run
    folder's checkpoint when there is one, None for none (``None`` or empty)."""
    if resume is None or resume == "":
        return None
    if resume == "auto":
        candidate = out_dir / CHECKPOINT_NAME
        return candidate if candidate.is_file() else None
    return Path(resume)


def capture_rng_state() -> dict[str, Any]:
    """RNG states of python, numpy and torch (CPU and every CUDA device) as plain values."""
    # legacy=True (the default) gives the tuple form
    kind, keys, position, has_gauss, cached = cast(
        tuple[str, np.ndarray, int, int, float], np.random.get_state()
    )
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), int(position), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    random.setstate(_as_tuple(state["python"]))
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically (temporary file in the same folder + rename)."""
    path = Path(path)
    with reporting_write_errors("checkpoint", path):  # disk full, read-only: one sentence
        path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_stream(
        path, lambda stream: torch.save(payload, stream), binary=True, what="checkpoint"
    )


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` onto the CPU."""
    path = Path(path)
    try:
        payload: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        return payload
    except FileNotFoundError:
        raise CorruptFileError(
            f"checkpoint {path} does not exist; check run.resume or start without it.", path
        ) from None
    except Exception as error:
        raise CorruptFileError(
            f"checkpoint {path} cannot be read ({type(error).__name__}); it is damaged or not "
            "a medvl checkpoint: resume from another one.",
            path,
        ) from None
