"""TopK-Patch scored one breast per forward (the shared path) against one batch of breasts.

The evaluation and every user path score breasts through
``medvl_engine.models.topksiglip_inference.score_breasts``, one breast per forward, so a
breast's numbers do not depend on the breasts scored with it. This prints, for the shipped
``topksiglip-demo`` model on random breast images at its own side, the largest difference a
batched forward makes to the embedding and ``log w`` (0 would mean batching is harmless),
whether the selections agree, and the wall time of the two, side by side (ratio per-breast /
batched).

    python bench/bench_topk_per_breast.py [--breasts 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--breasts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from medvl_engine.mammography import evaluated_k
    from medvl_engine.models.topksiglip_folder import load_topksiglip
    from medvl_engine.models.topksiglip_inference import score_breasts

    model = load_topksiglip("topksiglip-demo")
    k = evaluated_k("topksiglip-demo")
    side = model.config.image_size
    images = torch.rand(args.breasts, 1, side, side, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        batched = model.encode_image(images, k=k)
    alone = score_breasts(model, images, k=k, zero_shot=False)
    assert batched.log_weights is not None and batched.indices is not None
    embedding_gap = (batched.embedding - alone.embedding).abs().max().item()
    weight_gap = (batched.log_weights - torch.from_numpy(alone.log_weights)).abs().max().item()
    same_selection = bool((batched.indices.numpy() == alone.indices).all())

    def timed(run: object) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            started = time.perf_counter()
            run()  # type: ignore[operator]
            best = min(best, time.perf_counter() - started)
        return best

    with torch.no_grad():
        batch_s = timed(lambda: model.encode_image(images, k=k))
    single_s = timed(lambda: score_breasts(model, images, k=k, zero_shot=False))
    print(f"topksiglip-demo, {args.breasts} breasts of {side} px, K = {k}, 1 torch thread")
    print(
        f"largest |embedding| difference, batch of {args.breasts} vs one per forward: "
        f"{embedding_gap:.3g}"
    )
    print(f"largest |log w| difference: {weight_gap:.3g}; same selected patches: {same_selection}")
    print(
        f"batched {batch_s:.3f} s, one per forward {single_s:.3f} s, ratio {single_s / batch_s:.2f}"
    )


if __name__ == "__main__":
    main()
