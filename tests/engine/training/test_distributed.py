"""DDP with the gloo backend: 2 CPU ranks train like one process with accumulation."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.multiprocessing as mp

from medvl_engine.training import RunConfig, load_checkpoint, train
from tests.support.toy_task import ToyConfig, ToyTask, ddp_worker


@pytest.mark.slow  # the same run with a sharded evaluation is in the default tier
def test_two_gloo_ranks_match_one_process_with_two_step_accumulation(tmp_path, free_port):
    """The toy task (evaluated on rank 0 alone) on 2 gloo ranks trains like one process with
    grad_accum=2. The default tier covers the same property with the sharded-evaluation toy
    task: test_distributed_gather.py::test_evaluation_on_both_ranks_equals_the_single_process_metric
    (same steps, losses, weights and per-rank random states)."""
    results = tmp_path / "results"
    results.mkdir()
    mp.spawn(
        ddp_worker,
        args=(2, free_port(), str(tmp_path / "ddp"), str(results)),
        nprocs=2,
        join=True,
    )
    rank0 = json.loads((results / "rank0.json").read_text())
    rank1 = json.loads((results / "rank1.json").read_text())
    assert rank0["steps"] == rank1["steps"] == 12  # 12 slides / 2 ranks, 2 epochs
    assert rank0["losses"] == rank1["losses"]  # the logged loss is averaged over ranks

    # rank r takes items r, r+2, ...: the same pairs one process sees with grad_accum=2
    single = train(
        ToyTask(ToyConfig(dropout=0.0)),
        RunConfig(
            lr=1e-2, epochs=2, grad_accum=2, out_dir=str(tmp_path / "one"), progress=False, seed=3
        ),
    )
    assert single["steps"] == 12
    torch.testing.assert_close(
        torch.tensor(rank0["losses"]), torch.tensor(single["losses"]), rtol=1e-5, atol=1e-6
    )
    ddp_weights = load_checkpoint(tmp_path / "ddp" / "checkpoint.pt")["model"]
    one_weights = load_checkpoint(tmp_path / "one" / "checkpoint.pt")["model"]
    assert not any(key.startswith("module.") for key in ddp_weights)  # unwrapped state dict
    for key, value in one_weights.items():
        torch.testing.assert_close(ddp_weights[key], value, rtol=1e-4, atol=1e-5)
    assert len(load_checkpoint(tmp_path / "ddp" / "checkpoint.pt")["rng"]) == 2


def test_two_gloo_ranks_with_dataloader_workers_match_ranks_loading_in_process(
    tmp_path, free_port, process_gone
):
    from tests.support.loader_toy_task import ddp_loader_worker

    results = tmp_path / "results"
    results.mkdir()
    mp.spawn(  # each rank loads in process, then with one worker, in the same process group
        ddp_loader_worker,
        args=(2, free_port(), str(tmp_path), str(results), (0, 1)),
        nprocs=2,
        join=True,
    )
    in_process, in_workers = (
        [json.loads((results / f"workers{workers}-rank{r}.json").read_text()) for r in (0, 1)]
        for workers in (0, 1)
    )
    assert len(in_process[0]["losses"]) == 12  # 12 items / 2 ranks, 2 epochs
    assert in_workers[0]["losses"] == in_process[0]["losses"]  # bit-identical
    assert in_workers[1]["losses"] == in_process[1]["losses"]
    rank_pids = {pid for rank in in_process for pid in rank["pids"]}
    worker_pids = {pid for rank in in_workers for pid in rank["pids"]}
    assert len(rank_pids) == 2 and len(worker_pids) == 2 and not rank_pids & worker_pids
    deadline = time.time() + 10
    while not all(process_gone(pid) for pid in worker_pids) and time.time() < deadline:
        time.sleep(0.1)
    assert all(process_gone(pid) for pid in worker_pids)
