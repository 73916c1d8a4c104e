"""A tiny LIMIT cohort: zarr feature stores of report classes drawn around class centres, and
the manifest that names them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np


def write_limit_manifest(
    root: Path,
    write_feature_store: Callable[..., Path],
    reports: dict[str, str],
    slides: int,
    held_out: tuple[str, int],
    *,
    seed: int,
    noise: float,
    patches: tuple[int, int],
    dim: int = 16,
    organs: tuple[str, str] = ("lung", "breast"),
) -> Path:
    """Write slides s0 .. s{slides-1} as ``root/s<i>.zarr`` and ``root/manifest.jsonl``.

    Slide i has label ``list(reports)[i % 3]`` (``reports`` maps label -> report text) and
    features [n_i, dim] = its label's centre + ``noise`` * N(0, 1), n_i in [``patches``);
    centres ~ N(0, 1)^dim, all drawn from ``np.random.default_rng(seed)``. Its organ is
    ``organs[i % 2]``; its split is ``held_out[0]`` from index ``held_out[1]`` on, "train"
    before. ``write_feature_store(path, features, slide=...)`` writes one store."""
    rng = np.random.default_rng(seed)
    centres = {name: rng.normal(size=dim) for name in reports}
    split, first_held_out = held_out
    rows = []
    for index in range(slides):
        label = list(reports)[index % 3]
        size = int(rng.integers(*patches))
        features = centres[label] + noise * rng.normal(size=(size, dim))
        write_feature_store(root / f"s{index}.zarr", features, slide=f"s{index}")
        rows.append(
            {
                "slide_id": f"s{index}",
                "organ": organs[index % 2],
                "report": reports[label],
                "features": f"s{index}.zarr",
                "split": split if index >= first_held_out else "train",
                "label": label,
            }
        )
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(json.dumps(row) for row in rows))
    return manifest
