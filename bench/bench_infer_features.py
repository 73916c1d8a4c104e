"""Feature extraction throughput: the whole pipeline vs the encoder alone, in one run.

Writes a synthetic pyramidal slide (256-px JPEG tiles), then, for each encoder, measures on the
same patches:
  encoder alone   encode_patches on batches already decoded in memory
  whole pipeline  extract_features: tile reading + decoding + encoding + zarr writes
and prints the median patches/s of both over interleaved rounds and their ratio
(target >= 0.8: reading hidden behind compute). Encoders:
  medvl-demo      the handcrafted demo encoder (cheap: the hardest case to hide reading behind)
  vit-b16         a randomly initialised CLIP ViT-B/16 vision tower at 224 px (the architecture
                  of PLIP and QuiltNet), saved as a transformers CLIP folder and loaded through
                  the same code path as real checkpoints; its text tower is tiny (not measured)
"threads" is torch's intra-op thread count on both sides: all cores (the default) and, for
the demo encoder, also one fewer, which leaves a core to the reader.
Usage: bench_infer_features.py [--quick]   (--quick: one round each, fewer ViT patches)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from medvl_engine.encoders import load_encoder
from medvl_engine.features import extract_features, read_patches
from medvl_engine.io.slide import open_slide
from medvl_engine.synthetic import make_synthetic_slide

SLIDE_SIZE = (4096, 4096)


class _Grid:
    def __init__(self, coords: np.ndarray, patch_size: int) -> None:
        self.coords, self.patch_size, self.patch_size_level0 = coords, patch_size, patch_size
        self.level, self.target_mpp = 0, 0.5


def write_vit_b16_clip(folder: Path) -> Path:
    """A random CLIP with a ViT-B/16 vision tower (224 px, 12 x 768, 512-d projection)."""
    from transformers import CLIPConfig, CLIPModel

    from medvl_engine.models._clip_text import write_byte_level_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_byte_level_tokenizer(folder)
    tokenizer.save_pretrained(folder)
    config = CLIPConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 77,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": 224,
            "patch_size": 16,
        },
        projection_dim=512,
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(folder)
    return folder


def measure(
    slide, encoder, coords: np.ndarray, batch: int, rounds: int, scratch: Path, threads: int
) -> dict:
    """Median patches/s of the encoder alone and of extract_features, interleaved rounds.

    Both sides run with ``threads`` torch intra-op threads.
    """
    torch.set_num_threads(threads)
    size = encoder.patch_size
    grid = _Grid(coords, size)
    batches = [
        read_patches(slide, coords[i : i + batch], 0, size) for i in range(0, len(coords), batch)
    ]
    encoder.encode_patches(batches[0])  # warm-up
    encoder_rates, pipeline_rates = [], []
    for round_index in range(rounds):  # interleaved, so load changes hit both alike
        start = time.perf_counter()
        for patches in batches:
            encoder.encode_patches(patches)
        encoder_rates.append(len(coords) / (time.perf_counter() - start))
        out = scratch / f"{encoder.name}-threads{threads}-{round_index}.zarr"
        start = time.perf_counter()
        extract_features(slide, encoder, grid, out, batch_size=batch)
        pipeline_rates.append(len(coords) / (time.perf_counter() - start))
    encoder_rate, pipeline_rate = float(np.median(encoder_rates)), float(np.median(pipeline_rates))
    return {
        "patches": len(coords),
        "size": size,
        "batch": batch,
        "encoder": encoder_rate,
        "pipeline": pipeline_rate,
        "ratio": pipeline_rate / encoder_rate,
    }


def main() -> None:
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    quick = "--quick" in sys.argv[1:]
    cores = torch.get_num_threads()
    print(f"load average at start {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    results = {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        truth = make_synthetic_slide(scratch / "bench.tiff", seed=1, size=SLIDE_SIZE)
        vit = load_encoder(write_vit_b16_clip(scratch / "vit-b16"))
        vit.name = "vit-b16"
        demo = load_encoder("medvl-demo")
        with open_slide(truth.path) as slide:
            for label, encoder, batch, n_patches, rounds, threads in (
                ("medvl-demo", demo, 32, None, 1 if quick else 3, cores),
                ("medvl-demo", demo, 32, None, 1 if quick else 3, max(1, cores - 1)),
                ("vit-b16", vit, 8, 8 if quick else 16, 1 if quick else 2, cores),
            ):
                size = encoder.patch_size
                xs = np.arange(0, SLIDE_SIZE[0] - size + 1, size)
                ys = np.arange(0, SLIDE_SIZE[1] - size + 1, size)
                coords = np.array([(x, y) for y in ys for x in xs], dtype=np.int64)[:n_patches]
                results[(label, threads)] = measure(
                    slide, encoder, coords, batch, rounds, scratch, threads
                )
    torch.set_num_threads(cores)
    print(f"load average at end   {os.getloadavg()[0]:.2f}")
    header = ("encoder", "threads", "patches", "batch", "alone /s", "whole /s", "ratio")
    print(f"{header[0]:<12}" + "".join(f"{h:>10}" for h in header[1:]))
    for (label, threads), r in results.items():
        verdict = "met" if r["ratio"] >= 0.8 else "NOT met"
        print(
            f"{label:<12}{threads:>10}{r['patches']:>10}{r['batch']:>10}{r['encoder']:>10.1f}"
            f"{r['pipeline']:>10.1f}{r['ratio']:>10.2f}  (target >= 0.8: {verdict})"
        )


if __name__ == "__main__":
    main()
