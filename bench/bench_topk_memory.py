"""TopK-Patch vs full-image vision tower: peak memory and time of one training step (Table 4).

Three configurations of the ConvNeXt-Tiny vision tower, each measured in its own fresh
subprocess, side by side in one run:

* ``topk``      - TopK-Patch: 1536 px breast image, 512 px scorer, K = 15 patches of 181 px
                  extracted with Eq. 4 (relaxed selections, training mode);
* ``full1024``  - the full image resized to 1024 px through the whole ConvNeXt-Tiny;
* ``full1536``  - the full 1536 px image through the whole ConvNeXt-Tiny.

One step = forward + backward of ``embedding.sum()`` at ``--batch`` images. Peak memory: on CPU
the growth of the process's peak resident set (``ru_maxrss``) across the step, after the model
and the inputs exist; on CUDA ``torch.cuda.max_memory_allocated`` across the step. Time: the best
of ``--repeat`` steps after one warm-up step (CUDA, wall clock) or of the CPU time the process
spent (CPU, ``time.process_time``: robust to other jobs sharing the cores; one thread by default
so that it counts work, not spinning).

    python bench/bench_topk_memory.py --threads 2     # CPU, batch 4: ~20 GB peak, ~4 min
    python bench/bench_topk_memory.py --batch 1       # CPU with less memory
    python bench/bench_topk_memory.py --device cuda --repeat 3

The paper's target: TopK-Patch <= 0.4x the memory and <= 0.4x the time of full-1536.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

CONFIGS = ("topk", "full1024", "full1536")


def _model(kind: str):
    from medvl_engine.models.topksiglip import TopKSigLIPConfig, build_topksiglip

    text = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
    }
    config = TopKSigLIPConfig(
        vision_pretrained=None,
        text_pretrained=None,
        text_config=text,
        context_length=77,
        vision_mode="topk" if kind == "topk" else "full_image",
        full_image_resolution=1024 if kind == "full1024" else 1536,
    )
    return build_topksiglip(config)


def worker(kind: str, batch: int, repeat: int, device: str) -> dict:
    import torch

    torch.manual_seed(0)
    model = _model(kind).to(device).train()
    images = torch.rand(batch, 1, 1536, 1536, device=device)

    clock = time.perf_counter if device.startswith("cuda") else time.process_time

    def step() -> float:
        start = clock()
        out = model.encode_image(images)
        out.embedding.sum().backward()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        return clock() - start

    if device.startswith("cuda"):
        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        times = [step() for _ in range(repeat)]
        peak_mb = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = [step()]
        peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024.0
        times += [step() for _ in range(repeat - 1)]
    return {"config": kind, "batch": batch, "peak_mb": peak_mb, "time_s": min(times)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--batch", type=int, default=4, help="images per step (the paper's 4; CPU full1536 ~20 GB)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="steps timed per configuration")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per configuration")
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    batch = args.batch
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(worker(args.worker, batch, args.repeat, args.device)))
        return 0
    results = {}
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for kind in CONFIGS:
        command = [
            sys.executable,
            __file__,
            "--worker",
            kind,
            "--batch",
            str(batch),
            "--repeat",
            str(args.repeat),
            "--device",
            args.device,
            "--threads",
            str(args.threads),
        ]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"ConvNeXt-Tiny vision tower, one forward+backward step, batch {batch}, "
        f"device {args.device}, repeat {args.repeat}"
    )
    print(
        f"{'config':<10} {'peak MB':>10} {'time s':>9} {'mem/full1536':>13} {'time/full1536':>14}"
    )
    ref = results["full1536"]
    for kind in CONFIGS:
        r = results[kind]
        print(
            f"{kind:<10} {r['peak_mb']:>10.0f} {r['time_s']:>9.2f} "
            f"{r['peak_mb'] / ref['peak_mb']:>13.2f} {r['time_s'] / ref['time_s']:>14.2f}"
        )
    mem_ratio = results["topk"]["peak_mb"] / ref["peak_mb"]
    time_ratio = results["topk"]["time_s"] / ref["time_s"]
    verdict = "meets" if mem_ratio <= 0.4 and time_ratio <= 0.4 else "misses"
    print(
        f"TopK-Patch / full-1536: memory {mem_ratio:.2f}x, time {time_ratio:.2f}x "
        f"({verdict} the <= 0.4x target)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
