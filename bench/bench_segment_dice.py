"""Segmentation by prompts on synthetic slides with known regions: Dice per class, and speed.

Part 1 (Dice). Synthetic H&E slides (medvl_engine.synthetic, seeds 7001.. , used for no choice
of defaults) with all five tissue classes; the "medvl-demo" model scores them. For one patch
grid (overlap 1) and overlapping grids (patches every 1/2 and 1/4 of their side), each with
and without prompt ensembles (CONCH's templates x synonyms, or the class names alone), the
predicted map is compared with the ground-truth label map on its own grid (each truth pixel
takes the label of the map cell under its centre; "uncertain" and no tissue count for no
class): Dice_k = 2 |P_k & T_k| / (|P_k| + |T_k|), pooled over the slides. Also printed: the
patch-level macro AUROC of the cosine heatmap (v . t_k, one class against the rest, patches
labelled by the truth under their centre) with and without ensembles -- the measurement
behind the heatmap's default.

Part 2 (speed). From features in memory (a feature store of 100,000 patches x 256 dims and
5 class embeddings, smooth random class fields): probabilities alone (the scoring), then the
whole path to polygons (probabilities, map, regions, area table); median of 3 runs each and
their ratio.

    python bench/bench_segment_dice.py [--slides 3] [--size 3072] [--skip-dice]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

CLASSES = {
    "tumor": ("tumor", "carcinoma", "malignant epithelium"),
    "stroma": ("stroma", "fibrous stroma", "connective tissue"),
    "lymphocytes": ("lymphocytes", "lymphoid infiltrate", "lymphocytic infiltrate"),
    "adipose": ("adipose tissue", "fat", "adipocytes"),
    "necrosis": ("necrosis", "necrotic debris"),
}
TRUTH_IDS = {"tumor": 1, "stroma": 2, "lymphocytes": 3, "adipose": 4, "necrosis": 5}


def predicted_on_truth(result, truth) -> np.ndarray:
    """The map's labels (as truth class ids, 0 for no class) on the truth label grid."""
    mapped = result.class_map
    rows, cols = truth.label_map.shape
    ds = truth.label_downsample
    x = (np.arange(cols) + 0.5) * ds
    y = (np.arange(rows) + 0.5) * ds
    c = np.floor((x - mapped.origin_level0[0]) / mapped.cell_size_level0).astype(np.int64)
    r = np.floor((y - mapped.origin_level0[1]) / mapped.cell_size_level0).astype(np.int64)
    ok_c = (c >= 0) & (c < mapped.labels.shape[1])
    ok_r = (r >= 0) & (r < mapped.labels.shape[0])
    labels = np.zeros((rows, cols), np.int64)
    labels[np.ix_(ok_r, ok_c)] = mapped.labels[np.ix_(r[ok_r], c[ok_c])]
    lookup = np.zeros(len(mapped.label_names), np.int64)  # no tissue, uncertain -> 0
    for index, name in enumerate(mapped.names, start=1):
        lookup[index] = TRUTH_IDS[name]
    return lookup[labels]


def patch_truth(store, truth) -> np.ndarray:
    """Truth class id under each patch's centre [N]."""
    centre = store.coords + store.patch_size_level0 // 2
    ds = truth.label_downsample
    r = np.clip(centre[:, 1] // ds, 0, truth.label_map.shape[0] - 1)
    c = np.clip(centre[:, 0] // ds, 0, truth.label_map.shape[1] - 1)
    return truth.label_map[r, c].astype(np.int64)


def dice_part(n_slides: int, size: int) -> None:
    from medvl_engine.encoders import load_encoder
    from medvl_engine.evaluation.metrics import auroc
    from medvl_engine.io.slide import open_slide
    from medvl_engine.pathology import segment
    from medvl_engine.prompts import CONCH_TEMPLATES, ensemble_embeddings
    from medvl_engine.synthetic import make_synthetic_slide

    encoder = load_encoder("medvl-demo")
    folder = Path(tempfile.mkdtemp(prefix="bench-segment-"))
    truths = [
        make_synthetic_slide(
            folder / f"s{seed}.tiff", seed=seed, size=(size, size), classes=tuple(CLASSES)
        )
        for seed in range(7001, 7001 + n_slides)
    ]
    plain = {name: (names[0],) for name, names in CLASSES.items()}
    configs = [
        (overlap, label, classes, templates)
        for overlap in (1, 2, 4)
        for label, classes, templates in (
            ("names only", plain, "none"),
            ("ensembles", CLASSES, "conch"),
        )
    ]
    heatmap_scores: dict[str, list[float]] = {"names only": [], "ensembles": []}
    print(f"Dice per class on {n_slides} synthetic slides of {size}x{size} px at 0.5 um/px")
    header = "  ".join(f"{name[:11]:>11}" for name in CLASSES)
    print(f"{'grid':<16}{'prompts':<12}{header}  {'mean':>6}  {'patches':>8}  {'s':>6}")
    for overlap, label, classes, templates in configs:
        inter = np.zeros(len(CLASSES))
        sizes = np.zeros(len(CLASSES))
        patches, started = 0, time.perf_counter()
        for truth in truths:
            with open_slide(truth.path) as slide:
                result = segment(slide, classes, encoder, templates=templates, overlap=overlap)
            predicted = predicted_on_truth(result, truth)
            patches += result.store.n_patches
            for j, name in enumerate(CLASSES):
                p, t = predicted == TRUTH_IDS[name], truth.label_map == TRUTH_IDS[name]
                inter[j] += (p & t).sum()
                sizes[j] += p.sum() + t.sum()
            if overlap == 1:
                text = ensemble_embeddings(
                    encoder.encode_text, classes, CONCH_TEMPLATES if templates == "conch" else None
                ).numpy()
                cosine = result.store.features @ text.T  # [N, K]
                labels = patch_truth(result.store, truth)
                per_class = [
                    auroc(labels == TRUTH_IDS[name], cosine[:, j])
                    for j, name in enumerate(CLASSES)
                    if 0 < (labels == TRUTH_IDS[name]).sum() < len(labels)
                ]
                heatmap_scores[label].append(float(np.mean(per_class)))
        dice = 2 * inter / np.maximum(sizes, 1)
        grid = "one grid" if overlap == 1 else f"overlap 1/{overlap}"
        cells = "  ".join(f"{d:>11.3f}" for d in dice)
        elapsed = time.perf_counter() - started
        print(f"{grid:<16}{label:<12}{cells}  {dice.mean():>6.3f}  {patches:>8}  {elapsed:>6.1f}")
    for label, values in heatmap_scores.items():
        print(
            f"cosine heatmap, {label:<11}: patch-level macro AUROC {np.mean(values):.4f} "
            f"(per slide {', '.join(f'{v:.4f}' for v in values)})"
        )


def speed_part(n_patches: int = 100_000, k: int = 5, dim: int = 256) -> None:
    from scipy.ndimage import gaussian_filter

    from medvl_engine.features import FeatureStore
    from medvl_engine.segmentation import class_probabilities, segment_store

    rng = np.random.default_rng(0)
    side = int(np.ceil(np.sqrt(n_patches)))
    fields = np.stack([gaussian_filter(rng.normal(size=(side, side)), 6) for _ in range(k)])
    fields = 4 * fields / fields.std()
    weights = np.exp(fields - fields.max(0)).reshape(k, -1)[:, :n_patches].T  # [N, K]
    classes = np.linalg.qr(rng.normal(size=(dim, k)))[0].T.astype(np.float32)  # [K, D]
    features = weights @ classes + 0.05 * rng.normal(size=(n_patches, dim))
    index = np.arange(n_patches)
    coords = np.stack([index % side, index // side], axis=1) * 224
    store = FeatureStore(
        features=features.astype(np.float32),
        coords=coords,
        patch_size_level0=224,
        patch_size=224,
        mpp=(0.5, 0.5),
        slide_dimensions=(side * 224, side * 224),
        encoder="synthetic",
    )
    named = {f"class {j}": (f"class {j}",) for j in range(k)}

    def timed(run) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    scoring = timed(lambda: class_probabilities(store.features, classes, 100.0))
    holder = {}

    def whole() -> None:
        holder["r"] = segment_store(store, named, classes, logit_scale=100.0)

    total = timed(whole)
    result = holder["r"]
    print(
        f"{n_patches:,} patches x {k} classes ({dim} dims), {len(result.regions)} polygons, "
        f"map {result.class_map.labels.shape[0]}x{result.class_map.labels.shape[1]} cells"
    )
    print(f"scoring alone (probabilities)      {scoring:7.3f} s")
    print(f"features -> polygons + area table  {total:7.3f} s   ratio {total / scoring:.1f}x")
    print(f"within the 2 s budget: {'yes' if total <= 2.0 else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slides", type=int, default=3)
    parser.add_argument("--size", type=int, default=3072)
    parser.add_argument("--skip-dice", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEDVL_CACHE", tempfile.mkdtemp(prefix="bench-segment-cache-"))
    speed_part()
    if not args.skip_dice:
        dice_part(args.slides, args.size)


if __name__ == "__main__":
    main()
