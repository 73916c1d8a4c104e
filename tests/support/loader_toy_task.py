"""A toy task with ``batch_at`` for the DataLoader-worker tests.

A module, not a fixture: DataLoader worker processes and DDP ranks import the task by name.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator

import torch
from torch import nn

from tests.support.gloo import join_group
from tests.support.toy_task import ToySamples


@dataclasses.dataclass
class LoaderToyConfig:
    samples: int = 12
    dim: int = 4
    seed: int = 0
    fail_at: int | None = None  # batch index whose loading raises (every epoch)
    kill_at: int | None = None  # batch index whose loading kills the loading process
    load_delay_s: float = 0.0  # artificial per-batch I/O time
    step_delay_s: float = 0.0  # artificial per-step compute time


class LoaderToyTask(ToySamples):
    """Batch ``index`` of an epoch: inputs ``x`` [3, D], target ``y`` [3], and the pid that
    loaded it; the main-process copy records every pid it is given in ``loader_pids``."""

    name = "loader-toy"

    def __init__(self, config: LoaderToyConfig) -> None:
        super().__init__(config)
        self.loader_pids: set[int] = set()

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(self.config.dim, 8), nn.ReLU(), nn.Linear(8, 1))

    def batch_at(self, epoch: int, rank: int, world_size: int, index: int) -> dict:
        if index == self.config.fail_at:
            raise OSError(f"sample{index}.h5 is truncated\n(second line of detail)")
        if index == self.config.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.config.load_delay_s:
            time.sleep(self.config.load_delay_s)
        item = self._order(epoch, rank, world_size)[index]
        return {
            "x": self.inputs[item].clone(),
            "y": self.targets[item].clone(),
            "pid": torch.tensor(os.getpid()),
        }

    def train_batches(
        self, epoch: int, rank: int, world_size: int, start: int = 0
    ) -> Iterator[dict]:
        for index in range(start, self.num_batches(epoch, rank, world_size)):
            yield self.batch_at(epoch, rank, world_size, index)

    def compute_losses(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        self.loader_pids.add(int(batch["pid"]))
        if self.config.step_delay_s:
            time.sleep(self.config.step_delay_s)
        prediction = model(batch["x"]).squeeze(-1)
        return {"loss": ((prediction - batch["y"]) ** 2).mean()}

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        prediction = model(self.inputs.reshape(-1, self.config.dim)).squeeze(-1)
        return {"val_mse": float(((prediction - self.targets.reshape(-1)) ** 2).mean())}


def ddp_loader_worker(
    rank: int,
    world_size: int,
    port: int,
    out_root: str,
    result_dir: str,
    worker_counts: tuple[int, ...],
) -> None:
    """One gloo rank training the loader toy task once for each number of DataLoader workers
    per rank in ``worker_counts``, one run after the other in one process group; each run
    writes its losses and the pids that loaded its batches to
    ``result_dir/workers{n}-rank{rank}.json`` (its checkpoints to ``out_root/ddp{n}``)."""
    import json

    from medvl_engine.training import RunConfig, train

    join_group(rank, port, world_size)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    for num_workers in worker_counts:
        config = RunConfig(
            lr=1e-2,
            epochs=2,
            out_dir=os.path.join(out_root, f"ddp{num_workers}"),
            progress=False,
            seed=3,
            device="cpu",
            num_workers=num_workers,
        )
        task = LoaderToyTask(LoaderToyConfig())
        summary = train(task, config)  # joins the group above, which it leaves in place
        result = os.path.join(result_dir, f"workers{num_workers}-rank{rank}.json")
        with open(result, "w") as stream:
            json.dump({"losses": summary["losses"], "pids": sorted(task.loader_pids)}, stream)
    os._exit(0)  # leave at once: nothing is left to clean up once the results are written
