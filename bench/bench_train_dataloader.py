"""Data wait vs step time of the shared training loop, batches loaded in-process vs by 2 workers.

Three trainings, each run with ``run.num_workers=0`` and ``run.num_workers=2`` side by side in
this one process (in the order 0, 2, 2, 0, pooled per setting, so a drift in the machine's load
falls on both alike), reading ``data_s`` / ``step_s`` from each run's metrics.jsonl (the first
``--skip`` steps, which include the workers' start and the first prefetch, are left out of the
ratios; the wall time of the whole run includes them):

* TopKSigLIP at the paper's geometry (1536 px breast image, 16x16 grid, K = 15, 181 px patches),
  ``--topk-batch`` breasts per step (8 = the recipe's batch per process on 4 GPUs), a small
  ConvNeXt and text tower; every sample decodes its two synthetic DICOM views, as a manifest run
  does (no in-memory or disk cache), then is augmented and tokenised.
* LIMIT: one bag per step (an anchor slide and 4 same-organ negatives), each slide a TRIDENT-style
  ``.h5`` of ``--patches`` x 768 features read whole (no bag cache, as random access at TCGA
  scale mostly misses it), a small text tower.
* A toy task whose every batch waits ``--io-delay`` seconds (network or disk latency) before a
  fixed amount of compute per step: the overlap workers give when loading is I/O-bound.

    .venv/bin/python bench/bench_train_dataloader.py            # about 15 minutes on 2 cores
    .venv/bin/python bench/bench_train_dataloader.py --quick    # 5 steps, smaller LIMIT bags
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

from tests.support.tiny_bert import write_tiny_bert  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class IoDelayTask:
    """Batches that each wait ``delay`` seconds before being built; a step of fixed compute."""

    name = "io-delay"

    def __init__(self, batches: int, delay: float, width: int = 384) -> None:
        self.config = {"batches": batches, "delay": delay, "width": width}
        self.batches, self.delay, self.width = batches, delay, width

    def build_model(self) -> nn.Module:
        return nn.Sequential(*(nn.Linear(self.width, self.width) for _ in range(6)))

    def num_batches(self, epoch: int, rank: int, world_size: int) -> int:
        return self.batches

    def batch_at(self, epoch: int, rank: int, world_size: int, index: int) -> dict:
        time.sleep(self.delay)
        generator = torch.Generator().manual_seed(epoch * 100_003 + index)
        return {"x": torch.randn(256, self.width, generator=generator)}

    def train_batches(self, epoch: int, rank: int, world_size: int, start: int = 0):
        for index in range(start, self.batches):
            yield self.batch_at(epoch, rank, world_size, index)

    def compute_losses(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        return {"loss": model(batch["x"]).pow(2).mean()}

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {}


def _tiny_bert(folder: Path) -> Path:
    """A randomly initialised 2-layer BERT with a word-piece vocabulary, saved to ``folder``."""
    words = "tumor carcinoma invasive stroma adipose tissue lung breast colon seen".split()
    return write_tiny_bert(folder, words, hidden=64, max_positions=256)


def _limit_task(root: Path, slides: int, patches: int, out_dir: Path):
    import h5py

    from medvl_engine.tasks.limit.task import LimitTask, LimitTaskConfig
    from medvl_engine.training import RunConfig

    data = root / "limit-data"
    if not (data / "manifest.jsonl").is_file():
        data.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        rows = []
        for index in range(slides):
            path = data / f"slide{index:03d}.h5"
            with h5py.File(path, "w") as handle:
                features = rng.normal(size=(patches, 768)).astype(np.float32)
                handle.create_dataset("features", data=features)
            organ = ("lung", "breast", "colon")[index % 3]
            rows.append(
                {
                    "slide_id": f"slide{index:03d}",
                    "organ": organ,
                    "report": f"invasive carcinoma of the {organ}, tumor {index}",
                    "features": path.name,
                    "split": "train",
                    "label": "tumor",
                }
            )
        _tiny_bert(data / "bert")
        (data / "manifest.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    config = LimitTaskConfig(
        manifest=str(data / "manifest.jsonl"),
        text_model=str(data / "bert"),
        num_negatives=4,
        feature_cache=0,
        val_fraction=0.05,
        eval_robustness=False,
    )
    return LimitTask(config, RunConfig(out_dir=str(out_dir), seed=0))


def _topk_task(root: Path, breasts: int, batch: int, view_size: list[int], out_dir: Path):
    from medvl_engine.data.mammo_dataset import load_breast
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.task import build_task
    from medvl_engine.training import RunConfig

    config = TopKSigLIPTaskConfig(
        vision_pretrained=None,
        vision_depths=[1, 1, 1, 1],
        vision_hidden_sizes=[16, 32, 64, 128],
        image_size=1536,
        grid=16,
        low_res_factor=3,
        k=15,
        text_pretrained=None,
        text_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 256,
        },
        context_length=200,
        embed_dim=64,
        synthetic_train=breasts,
        synthetic_eval=0,
        synthetic_size=view_size,
        synthetic_dir=str(root / "topk-synthetic"),
        batch_size=batch,
        eval_k_sweep=[],
        linear_probe=False,
    )
    task = build_task(config, RunConfig(out_dir=str(out_dir), seed=0))
    # decode both DICOM views at every use, as a manifest run does
    task.train_set.loader = load_breast
    task.train_set._cache = None
    return task


def _measure(make_task, workers: int, steps: int, skip: int, out_dir: Path) -> dict[str, Any]:
    """One training run: per-step data_s and step_s after the first ``skip`` steps, and wall s."""
    from medvl_engine.training import RunConfig, train

    task = make_task(out_dir)
    config = RunConfig(
        lr=1e-4,
        epochs=1,
        max_steps=steps,
        out_dir=str(out_dir),
        progress=False,
        num_workers=workers,
        seed=0,
    )
    started = time.perf_counter()
    train(task, config)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in records if r.get("event") == "step"][skip:]
    return {
        "data": [r["data_s"] for r in measured],
        "step": [r["step_s"] for r in measured],
        "wall_s": wall,
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Pooled over runs: data-wait fraction, mean data / compute / step seconds, steps/s."""
    data = [value for run in runs for value in run["data"]]
    step = [value for run in runs for value in run["step"]]
    return {
        "data_fraction": sum(data) / sum(step),
        "data_s": sum(data) / len(step),
        "compute_s": (sum(step) - sum(data)) / len(step),
        "step_s": sum(step) / len(step),
        "steps_per_s": len(step) / sum(step),
        "wall_s": sum(run["wall_s"] for run in runs) / len(runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps, smaller data")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps per run")
    parser.add_argument("--skip", type=int, default=2, help="first steps left out of ratios")
    parser.add_argument("--topk-batch", type=int, default=8)
    parser.add_argument("--patches", type=int, default=None, help="patches per LIMIT slide")
    parser.add_argument("--io-delay", type=float, default=0.1)
    parser.add_argument(
        "--rounds", type=int, choices=(1, 2), default=2, help="2: runs in the order 0 2 2 0"
    )
    args = parser.parse_args(argv)
    steps = args.steps or (5 if args.quick else 8)
    patches = args.patches or (2000 if args.quick else 4000)
    view = [1024, 640]
    print(
        f"{os.cpu_count()} CPU cores, torch {torch.__version__} with {torch.get_num_threads()} "
        f"threads; {steps} steps per run, the first {args.skip} left out of the ratios; "
        f"{args.rounds} run(s) per setting, pooled"
    )
    with tempfile.TemporaryDirectory(prefix="bench-dataloader-") as folder:
        root = Path(folder)
        breasts = args.topk_batch * steps
        print(
            f"writing data: {breasts} synthetic breasts ({view[0]}x{view[1]} DICOM views), ", end=""
        )
        print(f"40 LIMIT slides of {patches} x 768 features (.h5)", flush=True)
        started = time.perf_counter()
        _topk_task(root, breasts, args.topk_batch, view, root / "prepare-topk")
        _limit_task(root, 40, patches, root / "prepare-limit")
        print(f"  ({time.perf_counter() - started:.0f} s)")
        suites = [
            (
                f"TopKSigLIP, batch {args.topk_batch} at 1536 px, decode + augment per sample",
                lambda out: _topk_task(root, breasts, args.topk_batch, view, out),
            ),
            (
                f"LIMIT, 1 bag of 5 slides x {patches} x 768 from .h5 per step",
                lambda out: _limit_task(root, 40, patches, out),
            ),
            (
                f"toy, {args.io_delay * 1000:.0f} ms I/O wait per batch + fixed compute",
                lambda out: IoDelayTask(steps, args.io_delay),
            ),
        ]
        header = (
            f"{'':44s} {'workers':>7s} {'data wait':>9s} {'data s':>7s} {'compute s':>9s} "
            f"{'step s':>7s} {'steps/s':>8s} {'wall s':>7s}"
        )
        print(header)
        # A B B A (or A B): a drift in the machine's load falls on both settings alike
        order = [0, 2, 2, 0] if args.rounds == 2 else [0, 2]
        for title, make in suites:
            runs: dict[int, list[dict[str, Any]]] = {0: [], 2: []}
            for number, workers in enumerate(order):
                out_dir = root / f"run-{title.split(',')[0]}-{number}-{workers}"
                runs[workers].append(_measure(make, workers, steps, args.skip, out_dir))
            results = {workers: _summary(pooled) for workers, pooled in runs.items()}
            for workers, stats in results.items():
                print(
                    f"{title[:44]:44s} {workers:7d} {stats['data_fraction']:9.1%} "
                    f"{stats['data_s']:7.3f} {stats['compute_s']:9.3f} {stats['step_s']:7.3f} "
                    f"{stats['steps_per_s']:8.2f} {stats['wall_s']:7.1f}",
                    flush=True,
                )
            ratio = results[2]["steps_per_s"] / results[0]["steps_per_s"]
            print(
                f"{'':44s} steps/s ratio 2 workers / in-process: {ratio:.2f}x; data wait "
                f"{results[0]['data_fraction']:.1%} -> {results[2]['data_fraction']:.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
