"""Synthetic LIMIT cohorts: feature stores of rendered H&E patches, reports and labels.

Each slide has one diagnostic tissue class (its label, e.g. "tumor") and one or two other
classes; its report (``synthetic.make_report``) names every class present in varied
wording with identifying noise lines. Patches are rendered with ``synthetic.render_tissue``
and embedded once by a frozen encoder (``medvl-demo`` by default) into two pools, one for
train/val slides and one for test slides, so no test patch is seen in training; a slide's
bag draws its patches from its pool. Every slide is written as a zarr feature store
("features" [N, D], "coords" [N, 2] (x, y) level-0 px on a virtual grid, "patch_labels"
[N]) and listed in ``manifest.csv`` (slide_id, organ, report, features, split, label).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from medvl_engine._atomic import atomic_write_stream

if TYPE_CHECKING:
    from medvl_engine.encoders import PatchTextEncoder

__all__ = ["DIAGNOSTIC_CLASSES", "make_synthetic_bags"]

DIAGNOSTIC_CLASSES = ("tumor", "stroma", "lymphocytes", "adipose", "necrosis")
_PATCH_PX = 224


def _encode_pool(
    encoder: PatchTextEncoder, rng: np.random.Generator, per_class: int
) -> dict[str, np.ndarray]:
    from medvl_engine.synthetic import render_tissue

    pool = {}
    for name in DIAGNOSTIC_CLASSES:
        patches = np.stack(
            [render_tissue(name, (_PATCH_PX, _PATCH_PX), rng) for _ in range(per_class)]
        )
        pool[name] = encoder.encode_patches(patches, normalize=False).numpy()
    return pool


def _write_store(
    path: Path, features: np.ndarray, labels: np.ndarray, slide: str, encoder: str
) -> None:
    import zarr

    group = zarr.open_group(str(path), mode="w")
    group.create_array("features", data=features.astype(np.float32))
    side = int(np.ceil(np.sqrt(len(features))))
    index = np.arange(len(features))
    coords = np.stack([(index % side) * _PATCH_PX, (index // side) * _PATCH_PX], axis=1)
    group.create_array("coords", data=coords.astype(np.int64))
    group.create_array("patch_labels", data=labels.astype(np.int64))
    group.attrs.update(
        {
            "patch_size_level0": _PATCH_PX,
            "patch_size": _PATCH_PX,
            "target_mpp": 0.5,
            "encoder": encoder,
            "slide": slide,
        }
    )


def make_synthetic_bags(
    out_dir: str | Path,
    *,
    n_slides: int = 120,
    patches_per_slide: tuple[int, int] = (24, 48),
    pool_per_class: int = 48,
    test_fraction: float = 0.3,
    val_fraction: float = 0.05,
    seed: int = 0,
    encoder_name: str = "medvl-demo",
) -> Path:
    """Write a synthetic cohort under ``out_dir`` and return its ``manifest.csv``.

    Re-running with the same arguments reuses the cohort already on disk.
    """
    from medvl_engine.encoders import load_encoder
    from medvl_engine.synthetic import ORGANS, make_report

    out_dir = Path(out_dir)
    manifest = out_dir / "manifest.csv"
    settings = {
        "n_slides": n_slides,
        "patches_per_slide": list(patches_per_slide),
        "pool_per_class": pool_per_class,
        "test_fraction": test_fraction,
        "val_fraction": val_fraction,
        "seed": seed,
        "encoder": encoder_name,
        "version": 1,
    }
    settings_file = out_dir / "cohort.json"
    if manifest.is_file() and settings_file.is_file():
        if json.loads(settings_file.read_text()) == settings:
            return manifest
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    encoder = load_encoder(encoder_name)
    pools = {
        "train": _encode_pool(encoder, rng, pool_per_class),
        "test": _encode_pool(encoder, rng, max(pool_per_class // 2, 4)),
    }
    order = rng.permutation(n_slides)
    n_test = int(round(test_fraction * n_slides))
    n_val = max(int(round(val_fraction * n_slides)), 1 if val_fraction > 0 else 0)
    split_of = {}
    for rank, index in enumerate(order):
        split_of[int(index)] = (
            "test" if rank < n_test else "val" if rank < n_test + n_val else "train"
        )
    rows = []
    for index in range(n_slides):
        organ = ORGANS[index % len(ORGANS)]
        label = DIAGNOSTIC_CLASSES[(index // len(ORGANS)) % len(DIAGNOSTIC_CLASSES)]
        others = [c for c in DIAGNOSTIC_CLASSES if c != label]
        extra = list(rng.choice(others, size=int(rng.integers(1, 3)), replace=False))
        count = int(rng.integers(patches_per_slide[0], patches_per_slide[1] + 1))
        n_label = int(rng.integers(count // 4, count // 2 + 1))
        names = [label] * n_label + [extra[i % len(extra)] for i in range(count - n_label)]
        pool = pools["test" if split_of[index] == "test" else "train"]
        features = np.stack([pool[n][rng.integers(len(pool[n]))] for n in names])
        labels = np.asarray([DIAGNOSTIC_CLASSES.index(n) for n in names])
        slide_id = f"synth-{index:04d}"
        _write_store(out_dir / f"{slide_id}.zarr", features, labels, slide_id, encoder_name)
        rows.append(
            {
                "slide_id": slide_id,
                "organ": organ,
                "report": make_report([label, *extra], rng, organ),
                "features": f"{slide_id}.zarr",
                "split": split_of[index],
                "label": label,
            }
        )

    def write_manifest(stream: IO[str]) -> None:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    atomic_write_stream(manifest, write_manifest, what="manifest")
    settings_file.write_text(json.dumps(settings))
    return manifest
