"""One synthetic view on disk: stored detector values, the DICOM file (Digital Mammography
X-Ray Image Storage - For Presentation) and the optional 16-bit display PNG.

The DICOM holds 16-bit unsigned stored values in a 12-bit range, MONOCHROME1 or MONOCHROME2, a
Modality LUT (RescaleSlope / RescaleIntercept) and a VOI window, ImageLaterality, ViewPosition,
PixelSpacing, and an obviously synthetic patient.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
from pydicom.dataset import FileMetaDataset
from pydicom.uid import UID, ExplicitVRLittleEndian, generate_uid

from medvl_engine.common.atomic import atomic_write

__all__ = ["MAMMO_SOP_CLASS", "WINDOW_HEADROOM", "to_stored", "write_view_dicom", "write_view_png"]

MAMMO_SOP_CLASS = UID("1.2.840.10008.5.1.4.1.1.1.2")
WINDOW_HEADROOM = 0.35
"""Attenuation units the display window reaches above the densest tissue (99.5th percentile).

Without it the densest fibroglandular tissue sits at the top of the window, and a mass or
calcification on it is clipped to the same white and cannot be seen.
"""
_RAW_PER_ATTENUATION = 2900.0


def to_stored(attenuation: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Raw detector values, MONOCHROME2 sense (dense = high), uint16 in [0, 4095]."""
    raw = 60.0 + _RAW_PER_ATTENUATION * attenuation + rng.normal(0.0, 12.0, attenuation.shape)
    return np.clip(np.round(raw), 0, 4095).astype(np.uint16)


def _uid(*parts: object) -> UID:
    return generate_uid(entropy_srcs=["medvl-synthetic-mammogram", *map(str, parts)])


def write_view_dicom(
    path: Path,
    pixels_mono2: np.ndarray,
    *,
    photometric: str,
    slope: float,
    view: str,
    laterality: str,
    spacing: tuple[float, float],
    exam_id: str,
    seed: int,
    breast: np.ndarray,
) -> None:
    """Write one view; ``pixels_mono2`` are stored values before any MONOCHROME1 inversion."""
    stored = 4095 - pixels_mono2 if photometric == "MONOCHROME1" else pixels_mono2
    tissue = pixels_mono2[breast].astype(np.float64) * slope
    low, high = np.percentile(tissue, [0.5, 99.5]) if tissue.size else (0.0, 4095.0 * slope)
    high += WINDOW_HEADROOM * _RAW_PER_ATTENUATION * slope
    if photometric == "MONOCHROME1":
        low, high = (4095 * slope - high, 4095 * slope - low)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MAMMO_SOP_CLASS
    meta.MediaStorageSOPInstanceUID = _uid(exam_id, laterality, view, seed)
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = MAMMO_SOP_CLASS
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = _uid(exam_id, "study")
    ds.SeriesInstanceUID = _uid(exam_id, laterality, view, "series")
    ds.PatientName = f"SYNTHETIC^{exam_id.upper().replace('-', '')}"
    ds.PatientID = f"SYNTH-{exam_id}"
    ds.PatientBirthDate = ""
    ds.PatientSex = "F"
    ds.StudyDate = "20260101"
    ds.AccessionNumber = ""
    ds.StudyDescription = "Synthetic screening mammogram (not a real patient)"
    ds.Modality = "MG"
    ds.Manufacturer = "medvl synthetic"
    ds.PresentationIntentType = "FOR PRESENTATION"
    ds.BodyPartExamined = "BREAST"
    ds.ImageLaterality = laterality
    ds.Laterality = laterality
    ds.ViewPosition = view
    ds.ImageType = ["ORIGINAL", "PRIMARY"]
    ds.PixelSpacing = [f"{spacing[0]:.6g}", f"{spacing[1]:.6g}"]
    ds.ImagerPixelSpacing = ds.PixelSpacing
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = photometric
    ds.Rows, ds.Columns = (int(v) for v in stored.shape)
    ds.BitsAllocated = 16
    ds.BitsStored = 12
    ds.HighBit = 11
    ds.PixelRepresentation = 0
    ds.RescaleSlope = f"{slope:g}"
    ds.RescaleIntercept = "0"
    ds.RescaleType = "US"
    ds.WindowCenter = f"{(low + high) / 2:.1f}"
    ds.WindowWidth = f"{max(high - low, 1.0):.1f}"
    ds.VOILUTFunction = "LINEAR"
    ds.PixelData = np.ascontiguousarray(stored, dtype="<u2").tobytes()
    atomic_write(
        path, lambda temporary: ds.save_as(temporary, enforce_file_format=True), what="mammogram"
    )


def write_view_png(path: Path, pixels_mono2: np.ndarray, breast: np.ndarray) -> None:
    from PIL import Image

    tissue = pixels_mono2[breast]
    low, high = np.percentile(tissue, [0.5, 99.5]) if tissue.size else (0, 4095)
    high += WINDOW_HEADROOM * _RAW_PER_ATTENUATION
    display = np.clip((pixels_mono2 - low) / max(high - low, 1.0), 0.0, 1.0)
    image = Image.fromarray(np.round(display * 65535).astype(np.uint16))
    atomic_write(path, lambda temporary: image.save(temporary, format="PNG"), what="mammogram")
