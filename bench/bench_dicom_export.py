"""DICOM export of one TopK-Patch exam beside the GeoJSON + CSV export of the same result.

One synthetic DICOM pair (CC + MLO, ``--rows`` x ``--cols`` px each) is run through the
shipped demo model once (real boxes, importance and zero-shot readouts); then each export is
repeated ``--repeats`` times into fresh folders and its median wall time printed:

  geojson+csv   write_topk_outputs(.geojson, .csv + _importance.npy): the existing export
  sr            write_topk_sr: the TID 1500 Comprehensive 3D SR
  sr+gsps       write_topk_dicom without parametric maps: SR + a presentation state per view
  sr+gsps+pm    write_topk_dicom: + the importance as a Parametric Map per view

with the ratio to geojson+csv and, for sr+gsps, the 1 s target. The first DICOM call (which
imports highdicom) is printed apart. Assert-free: it prints what it measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _median_seconds(
    step: Callable[[Path], object], root: Path, name: str, repeats: int
) -> tuple[float, float]:
    """(median wall s, median CPU s of this process) of ``repeats`` calls of ``step``."""
    walls, cpus = [], []
    for index in range(repeats):
        folder = root / f"{name}-{index}"
        folder.mkdir()
        started, cpu = time.perf_counter(), time.process_time()
        step(folder)
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=1280)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from medvl_engine.export import write_topk_outputs
    from medvl_engine.export.dicom import write_topk_dicom, write_topk_sr
    from medvl_engine.mammography import topk
    from medvl_engine.synthetic import make_mammogram_case

    model = "topksiglip-demo"
    with tempfile.TemporaryDirectory(prefix="medvl-bench-dicom-") as name:
        root = Path(name)
        case = make_mammogram_case(root / "case", seed=11, size=(args.rows, args.cols))
        run = topk(case.cc_path, case.mlo_path, model)
        sources = {"CC": case.cc_path, "MLO": case.mlo_path}
        print(
            f"exam: 2 views of {args.rows} x {args.cols} px, K = {run.k}, "
            f"{len(run.zero_shot)} zero-shot tasks, model {model}"
        )
        first = root / "first"
        first.mkdir()
        started = time.perf_counter()
        write_topk_dicom(run, first, model_name=model, parametric_maps=False)
        print(f"first DICOM call (imports highdicom): {time.perf_counter() - started:.3f} s")

        steps: dict[str, Callable[[Path], object]] = {
            "geojson+csv": lambda out: write_topk_outputs(
                run.result,
                run.breast.image,
                sources,
                [out / "topk.geojson", out / "topk.csv"],
                model=model,
            ),
            "sr": lambda out: write_topk_sr(run, out / "topk_sr.dcm", model_name=model),
            "sr+gsps": lambda out: write_topk_dicom(
                run, out, model_name=model, parametric_maps=False
            ),
            "sr+gsps+pm": lambda out: write_topk_dicom(run, out, model_name=model),
        }
        seconds = {
            key: _median_seconds(step, root, key, args.repeats) for key, step in steps.items()
        }
        base_wall, base_cpu = seconds["geojson+csv"]
        print(f"median of {args.repeats} runs each (wall and CPU time of this process):")
        for key, (wall, cpu) in seconds.items():
            size = _size(root / f"{key}-0") / 1e6
            print(
                f"  {key:<12} wall {wall:7.3f} s  cpu {cpu:7.3f} s  {size:7.2f} MB  "
                f"ratio to geojson+csv: wall {wall / base_wall:6.1f}  cpu {cpu / base_cpu:6.1f}"
            )
        wall, cpu = seconds["sr+gsps"]
        verdict = "within" if wall <= 1.0 else "OVER"
        print(f"target: SR + GSPS within 1 s: wall {wall:.3f} s ({verdict}), cpu {cpu:.3f} s")
        print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
