"""A PACS round trip on this machine: STOW-RS of one exam, WADO-RS back, against a local copy.

Starts a real Orthanc (with its DICOMweb plugin) on a free localhost port, writes one
synthetic four-view mammography exam (L/R x CC/MLO, 16-bit DICOM) and measures, best of
``--repeat`` runs each:
  copy      copying the four files to another folder (shutil.copyfile): the floor
  STOW      `medvl_engine.io.dicomweb.send` of the four files (one request, then the check
            that the server lists every instance)
  WADO      `fetch` of the study into an empty cache (QIDO search + one WADO-RS per instance)
  cached    `fetch` again: only the QIDO search, the files are already in the cache
  resolve   `resolve_mammo_study` with an empty cache: study metadata + the two views of one
            breast that TopK reads
and prints each time with its ratio to the copy. Skips (exit 0) when Orthanc is not installed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _best(repeat: int, setup: Callable[[], None], work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        setup()
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, nargs=2, default=(2048, 1280), metavar=("ROWS", "COLS"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from tests.support.orthanc import orthanc_missing, running_orthanc

    missing = orthanc_missing()
    if missing:
        print(f"skipped: {missing}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="medvl-bench-dicomweb-"))
    os.environ["MEDVL_CACHE"] = str(work / "cache")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"  # a local server
    try:
        from medvl_engine.io.dicomweb import fetch, parse_reference, resolve_mammo_study, send
        from medvl_engine.synthetic import make_mammogram_case

        for seed, side in ((1, "L"), (2, "R")):
            make_mammogram_case(
                work / "exam", seed=seed, laterality=side, size=tuple(args.size), exam_id="b1"
            )
        files = sorted((work / "exam").glob("*.dcm"))
        megabytes = sum(f.stat().st_size for f in files) / 1e6
        import pydicom

        study = str(pydicom.dcmread(files[0], stop_before_pixels=True).StudyInstanceUID)
        started = time.perf_counter()
        with running_orthanc(work / "orthanc") as server:
            up = time.perf_counter() - started
            reference = parse_reference(f"{server.dicomweb}/studies/{study}")

            def fresh_copy_folder() -> None:
                shutil.rmtree(work / "copy", ignore_errors=True)
                (work / "copy").mkdir()

            def empty_cache() -> None:
                shutil.rmtree(work / "cache", ignore_errors=True)

            copy = _best(
                args.repeat,
                fresh_copy_folder,
                lambda: [shutil.copyfile(f, work / "copy" / f.name) for f in files],
            )
            stow = _best(args.repeat, server.clear, lambda: send(files, server.dicomweb))
            wado = _best(args.repeat, empty_cache, lambda: fetch(reference))
            cached = _best(args.repeat, lambda: None, lambda: fetch(reference))
            resolve = _best(args.repeat, empty_cache, lambda: resolve_mammo_study(reference))
        print(
            f"one exam: {len(files)} files, {megabytes:.1f} MB ({args.size[0]} x {args.size[1]} "
            f"px, 16-bit); Orthanc up in {up:.2f} s (start to ready); best of {args.repeat}"
        )
        for name, seconds, note in (
            ("copy", copy, ""),
            ("STOW", stow, ""),
            ("WADO", wado, ""),
            ("cached", cached, ""),
            ("resolve", resolve, "  (2 of the 4 files: one breast's CC and MLO)"),
        ):
            print(
                f"  {name:8s} {seconds * 1000:8.1f} ms  x{seconds / copy:6.1f} the local copy"
                + (f"  {megabytes / seconds:7.1f} MB/s" if not note else note)
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
