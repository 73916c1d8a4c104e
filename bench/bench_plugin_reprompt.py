"""Re-prompting through the plugin vs the bare engine call, measured side by side in one run.

A synthetic slide's features are extracted once through the heatmap widget's job (the first
request). Then, over interleaved rounds with new prompts each time:
  engine alone   encode_text + similarity_map + top_patches on the loaded store
  plugin path    the widget's job generator on its FeatureCache (no extraction) plus the
                 heatmap and top-patch layers built by Layer.create (what the widget adds)
Prints the median milliseconds of both, their ratio (the plugin's overhead on a new prompt),
and the first request's time against a re-prompt. No viewer and no display needed.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from napari.layers import Layer

from medvl_engine.encoders import load_encoder
from medvl_engine.heatmap import similarity_map, top_patches
from medvl_engine.io.slide import open_slide
from medvl_engine.synthetic import make_synthetic_slide
from napari_medvl._heatmap_job import FeatureCache, HeatmapRequest, heatmap_job
from napari_medvl._layers import heatmap_result_layers, slide_frame

SLIDE_SIZE = (4096, 3072)
PROMPTS = ("tumor", "stroma", "lymphocytes", "adipose tissue", "necrosis", "carcinoma")
ROUNDS = 3


def _drain(generator):
    while True:
        try:
            next(generator)
        except StopIteration as stop:
            return stop.value


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        made = make_synthetic_slide(Path(scratch) / "bench.tiff", seed=2, size=SLIDE_SIZE)
        slide = open_slide(made.path)
        frame = slide_frame(slide.mpp)
        cache = FeatureCache(root=Path(scratch) / "features")
        encoder = load_encoder("medvl-demo")
        cache.encoders["medvl-demo"] = encoder

        started = time.perf_counter()
        first = _drain(heatmap_job(HeatmapRequest(slide, "medvl-demo", ("tumor",)), cache))
        first_ms = (time.perf_counter() - started) * 1e3
        store = first.store

        engine_ms, plugin_ms = [], []
        for _ in range(ROUNDS):
            for prompt in PROMPTS:
                started = time.perf_counter()
                text = encoder.encode_text([prompt])
                heatmap = similarity_map(store, text, prompt=prompt)
                top_patches(store, heatmap.scores, n=10)
                engine_ms.append((time.perf_counter() - started) * 1e3)

                started = time.perf_counter()
                request = HeatmapRequest(slide, "medvl-demo", (prompt,))
                outcome = _drain(heatmap_job(request, cache))
                for layer_data in heatmap_result_layers(outcome, frame):
                    Layer.create(*layer_data)
                plugin_ms.append((time.perf_counter() - started) * 1e3)
        engine, plugin = statistics.median(engine_ms), statistics.median(plugin_ms)
        print(f"patches: {store.n_patches}, prompts x rounds: {len(PROMPTS)} x {ROUNDS}")
        print(f"engine alone (text + map + top patches): {engine:8.1f} ms")
        print(f"plugin path (job + layers)             : {plugin:8.1f} ms")
        print(f"ratio plugin / engine                  : {plugin / engine:8.2f}x")
        print(f"first request (with extraction)        : {first_ms:8.1f} ms")
        print(f"ratio first request / re-prompt        : {first_ms / plugin:8.1f}x")


if __name__ == "__main__":
    main()
