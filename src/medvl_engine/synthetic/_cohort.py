"""Cohorts of synthetic slides with a CSV manifest (one row per slide) and saved label maps."""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from medvl_engine.common.atomic import atomic_write_stream
from medvl_engine.data.mammo_manifest import MANIFEST_COLUMNS
from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic._mammo import SyntheticMammoCase, make_mammogram_case
from medvl_engine.synthetic._slides import SyntheticSlide, make_synthetic_slide
from medvl_engine.synthetic.reports import ORGANS

__all__ = [
    "MAMMO_MANIFEST_COLUMNS",
    "SLIDE_MANIFEST_COLUMNS",
    "assign_splits",
    "make_mammogram_cohort",
    "make_synthetic_cohort",
    "write_csv_atomic",
]

SLIDE_MANIFEST_COLUMNS: tuple[str, ...] = (
    "slide_id",
    "organ",
    "report",
    "slide_path",
    "split",
    "classes",
    "label_path",
    "label_downsample",
    "mpp",
)


def write_csv_atomic(path: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (dicts keyed by ``columns``) to ``path`` through a temporary file."""

    def write(handle: IO[str]) -> None:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)

    atomic_write_stream(path, write, what="manifest")


def assign_splits(
    groups: Sequence[str], fractions: tuple[float, float, float], rng: np.random.Generator
) -> list[str]:
    """ "train" / "val" / "test" per item, stratified by group; every group gets a training item."""
    splits = ["train"] * len(groups)
    for group in sorted(set(groups)):
        members = [i for i, g in enumerate(groups) if g == group]
        members = [members[i] for i in rng.permutation(len(members))]
        n_val = int(round(fractions[1] * len(members)))
        n_test = int(round(fractions[2] * len(members)))
        while n_val + n_test >= len(members) and (n_val or n_test):
            if n_test >= n_val:
                n_test -= 1
            else:
                n_val -= 1
        for index in members[:n_val]:
            splits[index] = "val"
        for index in members[n_val : n_val + n_test]:
            splits[index] = "test"
    return splits


def make_synthetic_cohort(
    out_dir: str | Path,
    n_slides: int,
    seed: int,
    organs: Sequence[str] = ORGANS,
    *,
    size: tuple[int, int] = (2048, 2048),
    mpp: float = 0.5,
    split_fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    compression: str = "jpeg",
) -> list[SyntheticSlide]:
    """Write ``n_slides`` synthetic slides, their label maps and ``manifest.csv`` into ``out_dir``.

    Organs are assigned round-robin so every organ has slides (same-organ negatives for LIMIT);
    splits are stratified by organ. Manifest columns: ``SLIDE_MANIFEST_COLUMNS``; paths in it are
    absolute; ``classes`` is semicolon-separated; label maps are .npy uint8 arrays.
    """
    if n_slides < 1:
        raise SyntheticDataError(f"n_slides must be at least 1, got {n_slides}")
    organs = [o.lower() for o in organs]
    unknown = sorted(set(organs) - set(ORGANS))
    if unknown:
        raise SyntheticDataError(f"unknown organ(s) {unknown}; use some of {', '.join(ORGANS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    slide_seeds = rng.integers(0, 2**31 - 1, n_slides)
    slides: list[SyntheticSlide] = []
    for index in range(n_slides):
        slide_id = f"synth-{seed}-{index:04d}"
        slide = make_synthetic_slide(
            out / f"{slide_id}.tif",
            seed=int(slide_seeds[index]),
            size=size,
            mpp=mpp,
            organ=organs[index % len(organs)],
            compression=compression,
            slide_id=slide_id,
        )
        label_path = out / f"{slide_id}_labels.npy"
        atomic_write_stream(
            label_path,
            functools.partial(np.save, arr=slide.label_map),
            binary=True,
            what="label map",
        )
        slides.append(slide)
    splits = assign_splits([s.organ for s in slides], split_fractions, rng)
    rows = [
        {
            "slide_id": s.slide_id,
            "organ": s.organ,
            "report": s.report,
            "slide_path": str(s.path.resolve()),
            "split": split,
            "classes": ";".join(s.classes_present),
            "label_path": str((out / f"{s.slide_id}_labels.npy").resolve()),
            "label_downsample": s.label_downsample,
            "mpp": s.mpp,
        }
        for s, split in zip(slides, splits, strict=True)
    ]
    write_csv_atomic(out / "manifest.csv", SLIDE_MANIFEST_COLUMNS, rows)
    return slides


MAMMO_MANIFEST_COLUMNS: tuple[str, ...] = (*MANIFEST_COLUMNS, "photometric")
"""The breast-level manifest's columns (medvl_engine.data.mammo_manifest) plus the
synthetic case's photometric interpretation."""


def make_mammogram_cohort(
    out_dir: str | Path,
    n: int,
    seed: int,
    *,
    size: tuple[int, int] = (1024, 640),
    split_fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    write_png: bool = False,
) -> list[SyntheticMammoCase]:
    """Write ``n`` synthetic breasts (two views each) and a breast-level ``manifest.csv``.

    Breasts pair up into exams (left then right breast of ``mg<seed>-<k>``); density, photometric
    interpretation and split are drawn per exam, so both breasts of an exam share them.
    Columns: ``MAMMO_MANIFEST_COLUMNS``; ``findings``
    is semicolon-separated, ``roi_boxes`` JSON {"CC": [[x0, y0, x1, y1], ...], "MLO": [...]} in
    source px, ``cancer`` 0/1, paths absolute.
    """
    if n < 1:
        raise SyntheticDataError(f"n must be at least 1, got {n}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    case_seeds = rng.integers(0, 2**31 - 1, n)
    n_exams = (n + 1) // 2
    exam_density = rng.choice(list("ABCD"), n_exams, p=[0.1, 0.4, 0.4, 0.1])
    exam_photometric = rng.choice(["MONOCHROME1", "MONOCHROME2"], n_exams)
    cases = [
        make_mammogram_case(
            out,
            seed=int(case_seeds[i]),
            laterality="L" if i % 2 == 0 else "R",
            size=size,
            density=str(exam_density[i // 2]),
            photometric=str(exam_photometric[i // 2]),
            exam_id=f"mg{seed}-{i // 2:04d}",
            write_png=write_png,
        )
        for i in range(n)
    ]
    exam_ids = sorted({c.exam_id for c in cases})
    exam_split = dict(
        zip(exam_ids, assign_splits(["all"] * len(exam_ids), split_fractions, rng), strict=True)
    )
    rows = [
        {
            "exam_id": c.exam_id,
            "laterality": c.laterality,
            "cc_path": str(c.cc_path.resolve()),
            "mlo_path": str(c.mlo_path.resolve()),
            "report": c.report,
            "birads": c.birads,
            "density": c.density,
            "cancer": int(c.cancer),
            "findings": ";".join(c.findings),
            "roi_boxes": json.dumps(c.boxes),
            "split": exam_split[c.exam_id],
            "photometric": c.photometric,
        }
        for c in cases
    ]
    write_csv_atomic(out / "manifest.csv", MAMMO_MANIFEST_COLUMNS, rows)
    return cases
