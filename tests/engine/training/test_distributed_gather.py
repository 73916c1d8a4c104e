"""Gathered losses and sharded evaluation with 2 gloo ranks equal one process on the full batch;
the ranks train like one process with gradient accumulation."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from medvl_engine.errors import ConfigError
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.training_task import alignment_loss
from medvl_engine.training import RunConfig, load_checkpoint, train
from medvl_engine.training import distributed as distributed_module
from medvl_engine.training.distributed import gather_objects, gather_with_grad
from tests.support.gloo import WORLD, join_group, leave
from tests.support.toy_task import ToyConfig, ToyTask, ddp_eval_worker

PER_RANK = 3  # rank 1 holds one row fewer: unequal shards are gathered too
OBJECTIVES = [("sigmoid", "tabular"), ("sigmoid", "identity"), ("contrastive", "identity")]
OBJECTIVES.append(("contrastive", "tabular"))


def _full_batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    rows = 2 * PER_RANK - 1
    attributes = (torch.rand(rows, 9, generator=generator) > 0.6).double()
    attributes[:, 0] = 1.0  # every row has one label set, as a real tabular vector does
    return {
        "pixels": torch.randn(rows, 6, generator=generator, dtype=torch.float64),
        "words": torch.randn(rows, 6, generator=generator, dtype=torch.float64),
        "attributes": attributes,
    }


def _rows(rank: int) -> slice:
    return slice(0, PER_RANK) if rank == 0 else slice(PER_RANK, 2 * PER_RANK - 1)


class _Towers(nn.Module):
    """Two linear towers and a learnt scale and bias, like the TopKSigLIP joint space."""

    def __init__(self, with_bias: bool) -> None:
        super().__init__()
        torch.manual_seed(11)
        self.vision = nn.Linear(6, 5).double()
        self.text = nn.Linear(6, 5).double()
        self.logit_scale = nn.Parameter(torch.tensor(10.0, dtype=torch.float64))
        # DDP needs every parameter in the loss: the contrastive objectives have no bias
        self.logit_bias = (
            nn.Parameter(torch.tensor(-2.0, dtype=torch.float64)) if with_bias else None
        )

    def forward(self, pixels: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.vision(pixels), self.text(words)


def _loss_and_grads(
    model: nn.Module, inner: _Towers, batch: dict[str, torch.Tensor], objective: str, target: str
) -> dict[str, object]:
    config = TopKSigLIPTaskConfig(objective=objective, target=target)
    pixels = batch["pixels"].clone().requires_grad_(True)
    words = batch["words"].clone().requires_grad_(True)
    images, texts = model(pixels, words)
    loss = alignment_loss(
        config, images, texts, batch["attributes"], inner.logit_scale, inner.logit_bias
    )
    loss.backward()
    result = {
        "loss": float(loss.detach()),
        "pixels_grad": pixels.grad.tolist(),
        "words_grad": words.grad.tolist(),
        "params": {name: p.grad.tolist() for name, p in inner.named_parameters()},
    }
    model.zero_grad(set_to_none=True)
    return result


def _loss_worker(rank: int, port: int, result_dir: str) -> None:
    join_group(rank, port)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        mine = {key: value[_rows(rank)] for key, value in _full_batch().items()}
        results = {}
        for objective, target in OBJECTIVES:
            inner = _Towers(with_bias=objective == "sigmoid")
            model = nn.parallel.DistributedDataParallel(inner)
            key = f"{objective}-{target}"
            results[key] = _loss_and_grads(model, inner, mine, objective, target)
        gathered_rows = gather_with_grad(torch.full((PER_RANK - rank, 2), float(rank)))
        results["gathered_rows"] = gathered_rows[:, 0].tolist()
        results["objects"] = gather_objects({"rank": rank})
    finally:
        torch.distributed.destroy_process_group()
    leave(Path(result_dir, f"rank{rank}.json"), results)


def test_gathered_losses_and_gradients_equal_one_process_on_the_full_batch(
    tmp_path, spawn_ranks, free_port
):
    spawn_ranks(_loss_worker, (free_port(), str(tmp_path)))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert ranks[0]["gathered_rows"] == [0.0, 0.0, 0.0, 1.0, 1.0]  # rank order, unequal sizes
    assert ranks[1]["objects"] == [{"rank": 0}, {"rank": 1}]

    for objective, target in OBJECTIVES:
        key = f"{objective}-{target}"
        inner = _Towers(with_bias=objective == "sigmoid")
        single = _loss_and_grads(inner, inner, _full_batch(), objective, target)
        for rank, result in enumerate(ranks):
            # every rank reports the loss of all (2B-1)^2 pairs, not of its own B^2
            assert result[key]["loss"] == pytest.approx(single["loss"], rel=1e-6), key
            # DDP averages parameter gradients over ranks: the step is the full batch's step
            for name, grad in single["params"].items():
                torch.testing.assert_close(
                    torch.tensor(result[key]["params"][name]),
                    torch.tensor(grad),
                    rtol=1e-5,
                    atol=1e-7,
                )
            # each rank's inputs get W x their full-batch gradient (summed over the W
            # copies of the global loss); DDP's mean over ranks brings it back to 1x
            for name in ("pixels_grad", "words_grad"):
                torch.testing.assert_close(
                    torch.tensor(result[key][name]),
                    WORLD * torch.tensor(single[name])[_rows(rank)],
                    rtol=1e-5,
                    atol=1e-7,
                )


def test_single_process_gather_is_the_identity():
    local = torch.randn(4, 3, requires_grad=True)
    assert gather_with_grad(local) is local
    assert gather_objects(5) == [5]


def test_evaluation_on_both_ranks_equals_the_single_process_metric(
    tmp_path, spawn_ranks, free_port
):
    results = tmp_path / "results"
    results.mkdir()
    spawn_ranks(ddp_eval_worker, (free_port(), str(tmp_path / "ddp"), str(results)))
    rank0 = json.loads((results / "rank0.json").read_text())
    rank1 = json.loads((results / "rank1.json").read_text())
    assert rank0["shard_ranks"] == rank1["shard_ranks"] == [0, 1]  # both ranks evaluated
    assert rank1["evaluations"] == []  # only rank 0 records and logs
    assert [record["epoch"] for record in rank0["evaluations"]] == [0, 1]

    # the same run in one process: grad_accum=2 sees the pairs the 2 ranks see
    single = train(
        ToyTask(ToyConfig(dropout=0.0)),
        RunConfig(
            lr=1e-2, epochs=2, grad_accum=2, out_dir=str(tmp_path / "one"), progress=False, seed=3
        ),
    )
    for ddp_record, one_record in zip(rank0["evaluations"], single["evaluations"], strict=True):
        assert ddp_record["step"] == one_record["step"]
        assert ddp_record["val_mse"] == pytest.approx(one_record["val_mse"], rel=1e-4)
    logged = [
        json.loads(line)
        for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in line
    ]
    assert [record["val_mse"] for record in logged] == [
        record["val_mse"] for record in rank0["evaluations"]
    ]
    # and the ranks train like that process: the same steps, losses and weights
    assert rank0["steps"] == rank1["steps"] == single["steps"] == 12  # 12 slides, 2 epochs
    assert rank0["losses"] == rank1["losses"]  # the logged loss is averaged over ranks
    torch.testing.assert_close(
        torch.tensor(rank0["losses"]), torch.tensor(single["losses"]), rtol=1e-5, atol=1e-6
    )
    ddp_checkpoint = load_checkpoint(tmp_path / "ddp" / "checkpoint.pt")
    one_weights = load_checkpoint(tmp_path / "one" / "checkpoint.pt")["model"]
    assert not any(key.startswith("module.") for key in ddp_checkpoint["model"])  # unwrapped
    for key, value in one_weights.items():
        torch.testing.assert_close(ddp_checkpoint["model"][key], value, rtol=1e-4, atol=1e-5)
    assert len(ddp_checkpoint["rng"]) == 2  # one random state per rank


def test_process_group_timeout_comes_from_the_run_config(monkeypatch):
    calls = []
    monkeypatch.setattr(distributed_module.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(
        distributed_module.dist, "init_process_group", lambda **kwargs: calls.append(kwargs)
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    info = distributed_module.init_distributed("cpu", RunConfig().dist_timeout_minutes)
    assert calls[0]["backend"] == "gloo"
    assert calls[0]["timeout"] == datetime.timedelta(hours=2)
    assert (info.rank, info.world_size) == (1, 2)


def test_non_positive_timeout_is_refused():
    with pytest.raises(ConfigError, match=r"run.dist_timeout_minutes must be in \(0, 100,000\]"):
        RunConfig(dist_timeout_minutes=0)
