"""Synthetic LIMIT cohorts: feature stores of rendered H&E patches, reports and labels.

Each slide has one diagnosis of its organ (its label, e.g. "mastitis" for breast;
``synthetic.DIAGNOSES``), shown by one diagnostic tissue class (tumor, lymphocytes or
necrosis, 30-60% of the patches), and background tissue (stroma and/or fat) that every
diagnosis shares, so the label is identifiable from the slide as a pathologist would identify
it. Its report (``synthetic._reports.make_diagnosis_report``) states the diagnosis and, for
most slides, describes the tissue present in varied wording; identifying noise lines are
added. Zero-shot prompts name the diagnosis ("{tissue} {class}" -> "breast mastitis"), words
the demo text tower was never fitted on: reports are where it can learn them.
Patches are rendered with ``synthetic.render_tissue`` and embedded once by a frozen encoder
(``medvl-demo`` by default) into two pools, one for train/val slides and one for test slides,
so no test patch is seen in training; a slide's bag draws its patches from its pool. Slides
are split into three disjoint sets, train / val / test. Every slide is written as a zarr
feature store ("features" [N, D], "coords" [N, 2] (x, y) level-0 px on a virtual grid,
"patch_labels" [N] indices into DIAGNOSTIC_CLASSES) and listed in ``manifest.csv``
(slide_id, organ, report, features, split, label).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from medvl_engine.common.atomic import atomic_write_stream

if TYPE_CHECKING:
    from medvl_engine.encoders import PatchTextEncoder

__all__ = ["DIAGNOSTIC_CLASSES", "make_synthetic_bags"]

DIAGNOSTIC_CLASSES = ("tumor", "stroma", "lymphocytes", "adipose", "necrosis")  # patch labels
BACKGROUND_CLASSES = ("stroma", "adipose")
_PATCH_PX = 224
_DESCRIBED_FRACTION = 0.7  # reports with a microscopic description; the rest: diagnosis only


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
    from medvl_engine.features.store_io import write_store

    side = int(np.ceil(np.sqrt(len(features))))
    index = np.arange(len(features))
    coords = np.stack([(index % side) * _PATCH_PX, (index // side) * _PATCH_PX], axis=1)
    attrs = {
        "patch_size_level0": _PATCH_PX,
        "patch_size": _PATCH_PX,
        "target_mpp": 0.5,
        "encoder": encoder,
        "slide": slide,
    }
    write_store(path, features, coords, attrs, patch_labels=labels)


def _organ_and_label(index: int) -> tuple[str, str]:
    """Slide ``index``'s organ and diagnosis: organs cycle, then each organ's diagnoses."""
    from medvl_engine.synthetic.reports import DIAGNOSES, ORGANS

    organ = ORGANS[index % len(ORGANS)]
    diagnoses = list(DIAGNOSES[organ])
    return organ, diagnoses[(index // len(ORGANS)) % len(diagnoses)]


def make_synthetic_bags(
    out_dir: str | Path,
    *,
    n_slides: int = 120,
    patches_per_slide: tuple[int, int] = (24, 48),
    pool_per_class: int = 48,
    test_fraction: float = 0.3,
    val_fraction: float = 0.2,
    seed: int = 0,
    encoder_name: str = "medvl-demo",
) -> Path:
    """Write a synthetic cohort under ``out_dir`` and return its ``manifest.csv``.

    Re-running with the same arguments reuses the cohort already on disk.
    """
    from medvl_engine.encoders import load_encoder
    from medvl_engine.synthetic.reports import DIAGNOSES, make_diagnosis_report

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
        "version": 2,
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
    # Split stratified by (organ, diagnosis): each group is shuffled and cut test / val / train.
    split_of: dict[int, str] = {}
    groups: dict[tuple[str, str], list[int]] = {}
    for index in range(n_slides):
        groups.setdefault(_organ_and_label(index), []).append(index)
    for members in groups.values():
        order = [members[i] for i in rng.permutation(len(members))]
        n_test = int(round(test_fraction * len(order)))
        n_val = int(round(val_fraction * len(order)))
        for rank, index in enumerate(order):
            split_of[index] = (
                "test" if rank < n_test else "val" if rank < n_test + n_val else "train"
            )
    rows = []
    for index in range(n_slides):
        organ, label = _organ_and_label(index)
        shown_by = DIAGNOSES[organ][label]
        background = list(
            rng.choice(BACKGROUND_CLASSES, size=int(rng.integers(1, 3)), replace=False)
        )
        count = int(rng.integers(patches_per_slide[0], patches_per_slide[1] + 1))
        n_label = int(rng.integers(int(0.3 * count), int(0.6 * count) + 1))
        names = [shown_by] * n_label + [
            background[i % len(background)] for i in range(count - n_label)
        ]
        pool = pools["test" if split_of[index] == "test" else "train"]
        features = np.stack([pool[n][rng.integers(len(pool[n]))] for n in names])
        labels = np.asarray([DIAGNOSTIC_CLASSES.index(n) for n in names])
        slide_id = f"synth-{index:04d}"
        _write_store(out_dir / f"{slide_id}.zarr", features, labels, slide_id, encoder_name)
        describe = bool(rng.uniform() < _DESCRIBED_FRACTION)
        rows.append(
            {
                "slide_id": slide_id,
                "organ": organ,
                "report": make_diagnosis_report(
                    label, [shown_by, *background], rng, organ, describe
                ),
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
