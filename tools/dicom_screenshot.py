"""Make the README screenshot of a DICOM result read back in napari.

Run with a display (Xvfb is started when there is none)::

    tools/with_display.sh .venv/bin/python tools/dicom_screenshot.py --out docs/screenshots

It writes a synthetic DICOM mammogram pair (CC and MLO of one breast, 16-bit MG), runs
TopK-Patch on it with the shipped demo model (``medvl_engine.mammography.topk``), writes the
result as a TID 1500 Structured Report (``medvl_engine.export.dicom.write_topk_sr``, what
``medvl topk CC.dcm MLO.dcm --out result.dcm`` writes), then opens the two views and the SR in a
napari window through the plugin's reader (``napari_medvl._reader.get_reader``): the SR's
boxes are drawn on the views they reference. The window is saved as
``dicom_readback.png``, downscaled and palette-quantised like ``tools/readme_screenshots.py``.

Offline (HF_HUB_OFFLINE=1); the PNG is written atomically; the DICOM files go to a temporary
folder that is removed afterwards. A failure stops the script with one sentence (exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from readme_screenshots import DEFAULT_WIDTH, new_viewer, save_window, settle  # noqa: E402

MODEL = "topksiglip-demo"
NAME = "dicom_readback.png"


def dicom_result_files(folder: Path, seed: int) -> tuple[Path, Path, Path]:
    """(CC view, MLO view, SR) written into ``folder``: a synthetic pair and its TopK SR."""
    import pydicom

    from medvl_engine.export.dicom import write_topk_sr
    from medvl_engine.mammography import topk
    from medvl_engine.synthetic import make_mammogram_case

    case = make_mammogram_case(folder / "views", seed=seed, size=(1024, 640), laterality="L")
    # Patient Orientation, as real MG files state it (the SR's image library records it).
    for path, orientation in ((case.cc_path, ["P", "L"]), (case.mlo_path, ["A", "FR"])):
        header = pydicom.dcmread(path)
        header.PatientOrientation = orientation
        header.save_as(path)
    run = topk(case.cc_path, case.mlo_path, MODEL)
    results = folder / "results"  # never beside the views: their folder is their series
    results.mkdir()
    report = write_topk_sr(run, results / "result.dcm", model_name=MODEL)
    return Path(case.cc_path), Path(case.mlo_path), report


def readback_window(files: tuple[Path, Path, Path]) -> Any:
    """A napari window with the views and the SR opened through the plugin's reader."""
    from napari.layers import Layer

    from medvl_engine.errors import MedVLError
    from napari_medvl._reader import get_reader

    viewer = new_viewer("MedVL: a DICOM SR read back")
    cc, mlo, report = (str(path) for path in files)
    for paths in ([cc, mlo], [report]):  # the views first: the SR is drawn on them
        reader = get_reader(paths)
        if reader is None:
            raise MedVLError(f"The plugin's reader does not accept {paths}.")
        for data in reader(paths):
            if data[0] is None:
                raise MedVLError(f"The plugin's reader could not open {paths}.")
            viewer.add_layer(Layer.create(*data))
        settle()
    return viewer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="PNG width, px")
    parser.add_argument("--seed", type=int, default=5, help="seed of the synthetic breast")
    args = parser.parse_args(argv)

    from medvl_engine.errors import MedVLError

    started = time.perf_counter()
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="medvl-dicom-shot-") as folder:
            viewer = readback_window(dicom_result_files(Path(folder), args.seed))
            written = save_window(viewer, args.out / NAME, args.width)
    except MedVLError as error:
        print(f"dicom_screenshot: {error}", file=sys.stderr)
        return 2
    size_kb = written.stat().st_size / 1024
    print(f"{written}  {size_kb:.0f} KB  ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
