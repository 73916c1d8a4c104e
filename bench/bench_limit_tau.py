"""How peaked report-guided attention is for each tau_attn, on the synthetic LIMIT cohort.

For every held-out slide and every class prompt ("<organ> <class>", medvl-demo text tower,
untuned) it measures the attention of Eq. 1 over the slide's L2-normalised patch features:
the effective number of attended patches exp(H(alpha)) relative to the bag size, the
largest weight, and the zero-shot balanced accuracy, for tau_attn side by side.
Run: .venv/bin/python bench/bench_limit_tau.py
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F

TAUS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def main(cohort_dir: str = "runs/limit-demo/data") -> int:
    from medvl_engine.data import read_manifest
    from medvl_engine.encoders import load_encoder
    from medvl_engine.evaluation import balanced_accuracy
    from medvl_engine.features.bags import read_bag_features
    from medvl_engine.models.limit import report_guided_pool
    from medvl_engine.synthetic.reports import DIAGNOSES
    from medvl_engine.tasks.limit.synthetic_bags import make_synthetic_bags

    records = [r for r in read_manifest(make_synthetic_bags(cohort_dir)) if r.split == "test"]
    encoder = load_encoder("medvl-demo")
    prompts = {
        organ: encoder.encode_text([f"{organ} {name}" for name in DIAGNOSES[organ]])
        for organ in {r.organ for r in records}
    }
    bags = [F.normalize(read_bag_features(r.features), dim=-1) for r in records]
    print(
        f"{len(records)} test slides, bags of {min(len(b) for b in bags)}-"
        f"{max(len(b) for b in bags)} patches, 3 diagnoses per organ"
    )
    print(f"{'tau_attn':>8} {'effective patches':>18} {'max weight':>11} {'balanced acc':>13}")
    for tau in TAUS:
        shares, peaks, predictions = [], [], []
        for record, bag in zip(records, bags, strict=True):
            classes = prompts[record.organ]
            pooled, attention = report_guided_pool(bag, classes, tau, return_attention=True)
            entropy = -(attention * attention.clamp_min(1e-30).log()).sum(-1)
            shares.append((entropy.exp() / len(bag)).mean().item())
            peaks.append(attention.max(-1).values.mean().item())
            scores = F.cosine_similarity(pooled, classes, dim=-1)
            predictions.append(list(DIAGNOSES[record.organ])[int(scores.argmax())])
        accuracy = balanced_accuracy([r.label for r in records], predictions)
        print(f"{tau:>8.2f} {np.mean(shares):>17.1%} {np.mean(peaks):>11.3f} {accuracy:>13.3f}")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
