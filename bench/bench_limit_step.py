"""One LIMIT training step on a bag of 20,000 x 768 patch features with K = 5 reports.

Times the text encoder (a BERT-base-sized tower: 12 layers, width 768, 128-token reports;
forward, backward and AdamW step) against report-guided pooling + weighted InfoNCE
(forward and backward), measured side by side in the same run, and prints the share of
the step spent in pooling + loss (target: < 10%); the L2 normalisation of the frozen features
(data preparation, once per bag) is timed and reported on its own line.
Run: .venv/bin/python bench/bench_limit_step.py
"""

from __future__ import annotations

import statistics
import sys
import time

import torch


def _tower(vocab: int = 30522):
    from transformers import BertConfig, BertModel

    from medvl_engine.encoders import TextTower

    config = BertConfig(
        vocab_size=vocab,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
    )
    return TextTower(BertModel(config), tokenizer=None, pooling="mean")


def main(repeats: int = 4, patches: int = 20000, dim: int = 768, reports: int = 5) -> int:
    from medvl_engine.losses import weighted_infonce
    from medvl_engine.models.limit import LimitModel, bag_similarity

    torch.manual_seed(0)
    model = LimitModel(_tower(), tau_attn=0.05).train()
    model.text_tower.text.pooler.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5, weight_decay=1e-5)
    features = torch.randn(reports, patches, dim)
    mask = torch.ones(reports, patches, dtype=torch.bool)
    mask[1:, patches - 3000 :] = False  # variable-size bags, padded
    input_ids = torch.randint(1000, 30000, (reports, 128))
    attention = torch.ones(reports, 128, dtype=torch.long)

    text_times, pool_times, prepare_times = [], [], []
    for repeat in range(repeats + 1):
        start = time.perf_counter()
        embeddings = model.encode_tokens(input_ids, attention)  # [K, D]
        text_forward = time.perf_counter() - start

        start = time.perf_counter()
        prepared = model.prepare_features(features)
        preparation = time.perf_counter() - start

        start = time.perf_counter()
        queries = embeddings.detach().requires_grad_(True)
        similarity = bag_similarity(prepared, queries, 0.05, mask)
        loss = weighted_infonce(similarity, queries, tau=0.07)
        loss.backward()
        pooling = time.perf_counter() - start

        start = time.perf_counter()
        embeddings.backward(queries.grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        text_rest = time.perf_counter() - start
        if repeat:  # the first step warms up allocators and threads
            text_times.append(text_forward + text_rest)
            pool_times.append(pooling)
            prepare_times.append(preparation)

    text = statistics.median(text_times)
    pool = statistics.median(pool_times)
    prepare = statistics.median(prepare_times)
    share = pool / (text + pool + prepare)
    print(
        f"LIMIT step, bag {reports} x {patches} x {dim}, {reports} reports x 128 tokens, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"  text encoder (fwd + bwd + AdamW): {text * 1000:8.1f} ms")
    print(f"  pooling + weighted InfoNCE     : {pool * 1000:8.1f} ms")
    print(f"  feature L2 normalisation (data): {prepare * 1000:8.1f} ms  (once per bag, no grad)")
    print(f"  pooling + loss share of step   : {share:8.1%}  (target < 10%)")
    print(f"  normalisation share of step    : {prepare / (text + pool + prepare):8.1%}")
    print(f"  ratio text / (pooling + loss)  : {text / pool:8.1f}x")
    return 0 if share < 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
