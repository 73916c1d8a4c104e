"""The synthetic mammography cohort is the same file for file, whatever the thread counts.

Each cohort is built in a fresh interpreter with torch and the BLAS/OpenMP pools set to 1 or
2 threads; the SHA-256 of every file written (DICOM views, PNG copies, manifest) and of the
decoded breast images the model reads must agree.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

BUILD = """
import sys, torch
torch.set_num_threads(int(sys.argv[2]))
from medvl_engine.synthetic import make_mammogram_cohort
make_mammogram_cohort(sys.argv[1], 6, seed=11, size=(256, 176), write_png=True)
import numpy as np
from pathlib import Path
from medvl_engine.data.mammo_dataset import load_breast
from medvl_engine.data.mammo_manifest import read_mammo_manifest_contents
records = read_mammo_manifest_contents(Path(sys.argv[1]) / "manifest.csv").records
for index, record in enumerate(records):  # the decoded breast image the model reads
    image, boxes = load_breast(record, 128)
    np.save(Path(sys.argv[1]) / f"breast_{index}.npy", image)
    np.save(Path(sys.argv[1]) / f"boxes_{index}.npy", boxes)
"""


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _start_build(run_in_background, folder: Path, threads: int):
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    command = [sys.executable, "-c", BUILD, str(folder), str(threads)]
    return run_in_background(command, check=True, env=env, timeout=300)


def test_cohort_bytes_do_not_depend_on_thread_counts(tmp_path, run_in_background):
    # the two builds (1 and 2 threads) run at the same time
    builds = [
        _start_build(run_in_background, tmp_path / name, t) for name, t in (("one", 1), ("two", 2))
    ]
    for build in builds:
        build.result()
    one, two = _digests(tmp_path / "one"), _digests(tmp_path / "two")
    # two DICOM views, two PNGs, the decoded image and its boxes per breast, and the manifest
    assert len(one) == 6 * 6 + 1
    # the manifest holds absolute paths, so compare it with the folder name taken out
    manifest_one = (
        (tmp_path / "one" / "manifest.csv").read_text().replace(str(tmp_path / "one"), "")
    )
    manifest_two = (
        (tmp_path / "two" / "manifest.csv").read_text().replace(str(tmp_path / "two"), "")
    )
    assert manifest_one == manifest_two
    one.pop("manifest.csv"), two.pop("manifest.csv")
    assert one == two
