"""Re-prompting speed: scoring a new prompt on a cached 100,000 x 768 store vs the bare mat-vec.

Prints both times (median of repeats, same run) and their ratio; targets: <= 50 ms, ratio <= 5.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import similarity_map

N_PATCHES, DIM, REPEATS = 100_000, 768, 15


def _median_ms(function) -> float:
    function()  # warm-up
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main() -> None:
    rng = np.random.default_rng(0)
    side = int(np.ceil(np.sqrt(N_PATCHES)))
    ys, xs = np.divmod(np.arange(N_PATCHES), side)
    coords = np.stack([xs, ys], axis=1).astype(np.int64) * 448
    features = rng.standard_normal((N_PATCHES, DIM), dtype=np.float32)
    store = FeatureStore(features, coords, patch_size_level0=448, patch_size=448, mpp=(0.25, 0.25))
    prompt = torch.nn.functional.normalize(torch.randn(1, DIM), dim=-1)
    bare_matrix, bare_vector = store.features, prompt[0].numpy()

    bare_ms = _median_ms(lambda: bare_matrix @ bare_vector)
    cosine_ms = _median_ms(lambda: similarity_map(store, prompt))
    percentile_ms = _median_ms(lambda: similarity_map(store, prompt, normalize="percentile"))
    print(f"store {N_PATCHES} x {DIM} float32, torch threads {torch.get_num_threads()}")
    print(f"bare fp32 mat-vec            {bare_ms:7.2f} ms")
    print(f"similarity_map cosine        {cosine_ms:7.2f} ms  ratio {cosine_ms / bare_ms:5.2f}")
    ratio = percentile_ms / bare_ms
    print(f"similarity_map + percentile  {percentile_ms:7.2f} ms  ratio {ratio:5.2f}")
    ok = cosine_ms <= 50 and cosine_ms / bare_ms <= 5
    print(f"target (<= 50 ms and <= 5x bare): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
