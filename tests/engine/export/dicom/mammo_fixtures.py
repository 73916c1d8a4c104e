"""A real TopK-Patch run on a synthetic DICOM mammogram pair, and the checks every test uses.

The run uses the shipped demo model (boxes, scores and importance are the model's). Its text
encoder is skipped (``zero_shot=False``, 5 s on CPU); the readouts are set to the demo's
task/class structure with known probabilities, which is what the SR must record. The slow
test runs the real readouts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pydicom

ZERO_SHOT = {
    "density": {"A": 0.1, "B": 0.2, "C": 0.6, "D": 0.1},
    "birads": {"1": 0.05, "2": 0.1, "3": 0.15, "4": 0.5, "5": 0.2},
    "cancer": {"negative": 0.3, "positive": 0.7},
    "mass": {"negative": 0.25, "positive": 0.75},
    "architectural distortion": {"negative": 0.9, "positive": 0.1},
}


def run_topk(
    folder: Path,
    *,
    seed: int = 3,
    photometric: str = "MONOCHROME1",
    zero_shot: bool | dict = True,
    orientation: bool = False,
):
    """(case, BreastTopK) on a 512 x 320 synthetic pair written to ``folder``; with
    ``orientation`` the views state their Patient Orientation."""
    from medvl_engine.mammography import topk
    from medvl_engine.synthetic import make_mammogram_case

    case = make_mammogram_case(
        folder, seed=seed, size=(512, 320), photometric=photometric, write_png=True
    )
    if orientation:  # as real MG files state it (the SR's Image Library entries need it)
        for path, value in ((case.cc_path, ["P", "L"]), (case.mlo_path, ["A", "FR"])):
            header = pydicom.dcmread(path)
            header.PatientOrientation = value
            header.save_as(path)
    run = topk(case.cc_path, case.mlo_path, "topksiglip-demo", zero_shot=zero_shot is True)
    if isinstance(zero_shot, dict):
        run = dataclasses.replace(run, result=dataclasses.replace(run.result, zero_shot=zero_shot))
    return case, run


def dciodvfy_errors(path: Path) -> list[str]:
    """The ``Error`` lines dciodvfy prints for ``path``."""
    found = subprocess.run(
        [shutil.which("dciodvfy") or "dciodvfy", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = (found.stdout + found.stderr).splitlines()
    return [line for line in lines if line.startswith("Error")]


def image_library_entries(report: pydicom.Dataset) -> int:
    """How many images the SR's Image Library (DCM 111028) lists."""
    for item in report.ContentSequence:
        if item.ConceptNameCodeSequence[0].CodeValue == "111028":
            return sum(len(group.get("ContentSequence", [])) for group in item.ContentSequence)
    return 0


def text_values(dataset: pydicom.Dataset) -> list[str]:
    """Every text value of ``dataset`` and its sequences, scanned independently of the engine."""
    texts = []
    for element in dataset.iterall():
        if element.VR in ("SQ", "OB", "OW", "OF", "OD", "OL", "OV", "UN"):
            continue
        values = element.value if element.VM > 1 else [element.value]
        texts.extend(str(v) for v in values if isinstance(v, (str, pydicom.valuerep.PersonName)))
    return texts


def machine_folders(*extra: Path) -> list[str]:
    return ["/tmp", "/work", os.getcwd(), *(str(p) for p in extra)]
