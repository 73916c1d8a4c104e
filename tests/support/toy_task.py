"""A small regression task that exercises the shared training loop without any model zoo.

A module, not a fixture: ``ddp_worker`` and ``ddp_eval_worker`` run in ranks started by
torch.multiprocessing, which import it (and the task) by name; it imports no model zoo, so the
ranks start quickly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch
from torch import nn

from medvl_engine.training.distributed import shard_indices


@dataclasses.dataclass
class ToyConfig:
    samples: int = 12
    dim: int = 4
    nan_batches: tuple[int, ...] = ()  # global batch indices whose inputs are NaN
    seed: int = 0
    dropout: float = 0.3


class ToyModel(nn.Module):
    def __init__(self, dim: int, dropout: float = 0.3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 8), nn.Dropout(dropout), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


class ToySamples:
    """``samples`` seeded inputs ``x`` [samples, 3, dim] with targets ``y`` = half the sum of
    each row [samples, 3]; each epoch visits them in a seeded order, sharded over the ranks.
    ``config`` has ``samples``, ``dim`` and ``seed``."""

    def __init__(self, config) -> None:
        self.config = config
        generator = torch.Generator().manual_seed(config.seed)
        self.inputs = torch.randn(config.samples, 3, config.dim, generator=generator)
        self.targets = self.inputs.sum(dim=-1) * 0.5

    def _order(self, epoch: int, rank: int, world_size: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.config.seed * 1000 + epoch)
        permutation = torch.randperm(self.config.samples, generator=generator).tolist()
        return [permutation[i] for i in shard_indices(len(permutation), rank, world_size)]

    def num_batches(self, epoch: int, rank: int, world_size: int) -> int:
        return len(self._order(epoch, rank, world_size))


class ToyTask(ToySamples):
    name = "toy"

    def build_model(self) -> nn.Module:
        return ToyModel(self.config.dim, self.config.dropout)

    def train_batches(
        self, epoch: int, rank: int, world_size: int, start: int = 0
    ) -> Iterator[dict[str, torch.Tensor]]:
        for index in self._order(epoch, rank, world_size)[start:]:
            x = self.inputs[index].clone()
            if index in self.config.nan_batches:
                x.fill_(float("nan"))
            yield {"x": x, "y": self.targets[index]}

    def compute_losses(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        prediction = model(batch["x"])
        mse = ((prediction - batch["y"]) ** 2).mean()
        return {"loss": mse, "abs_error": (prediction - batch["y"]).abs().mean()}

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        prediction = model(self.inputs.reshape(-1, self.config.dim))
        mse = ((prediction - self.targets.reshape(-1)) ** 2).mean()
        return {"val_mse": float(mse), "neg_mse": -float(mse)}


def ddp_worker(rank: int, world_size: int, port: int, out_dir: str, result_dir: str) -> None:
    """One rank of a gloo DDP run of the toy task; writes its summary and weights to result_dir."""
    import json
    import os

    from medvl_engine.training import RunConfig, train
    from tests.support.gloo import join_group

    join_group(rank, port, world_size)
    config = RunConfig(lr=1e-2, epochs=2, out_dir=out_dir, progress=False, seed=3, device="cpu")
    summary = train(ToyTask(ToyConfig(dropout=0.0)), config)
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as stream:
        json.dump({"losses": summary["losses"], "steps": summary["steps"]}, stream)


class ShardedToyTask(ToyTask):
    """The toy task with an evaluation split over ranks (squared errors per eval item)."""

    def evaluate_shard(self, model: nn.Module, rank: int, world_size: int) -> dict:
        owned = sorted(set(shard_indices(self.config.samples, rank, world_size)))
        prediction = model(self.inputs[owned].reshape(-1, self.config.dim)).reshape(len(owned), -1)
        errors = ((prediction - self.targets[owned]) ** 2).sum(dim=1)
        return {"rank": rank, "errors": dict(zip(owned, errors.tolist(), strict=True))}

    def merge_evaluation(self, parts: list[dict]) -> dict[str, float]:
        errors: dict[int, float] = {}
        for part in parts:
            errors.update(part["errors"])
        if sorted(errors) != list(range(self.config.samples)):
            raise AssertionError("the shards do not cover the eval set exactly once")
        mse = sum(errors.values()) / (self.config.samples * self.inputs.shape[1])
        self.shard_ranks = [part["rank"] for part in parts]
        return {"val_mse": mse, "neg_mse": -mse}


def ddp_eval_worker(rank: int, port: int, out_dir: str, result_dir: str) -> None:
    """One of 2 gloo ranks training :class:`ShardedToyTask` (evaluation split over the ranks);
    writes its losses, steps, evaluations and the ranks whose shards it merged to result_dir."""
    from pathlib import Path

    from medvl_engine.training import RunConfig, train
    from tests.support.gloo import join_group, leave

    join_group(rank, port)
    config = RunConfig(
        lr=1e-2,
        epochs=2,
        out_dir=out_dir,
        progress=False,
        seed=3,
        device="cpu",
        dist_timeout_minutes=5,
    )
    task = ShardedToyTask(ToyConfig(dropout=0.0))
    summary = train(task, config)
    leave(
        Path(result_dir, f"rank{rank}.json"),
        {
            "evaluations": summary["evaluations"],
            "shard_ranks": task.shard_ranks,
            "losses": summary["losses"],
            "steps": summary["steps"],
        },
    )
