"""What every DICOM result of a whole-slide image shares: its DICOM source and its maker.

Results are derived objects of the source's study, in its frame of reference, referencing
its level-0 instance (see :mod:`medvl_engine.io.dicom_results.source`). A slide that is not
a DICOM whole-slide image (SVS, NDPI, TIFF, a plain image) gets one sentence instead: DICOM
outputs need a DICOM source. Every object names the model as the algorithm that made it
(name and medvl version, generation type AUTOMATIC) and carries the demo notice for a demo
model; no file path of this machine is written into any object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medvl_engine.common.model_label import model_metadata
from medvl_engine.errors import ExportError, MedVLError
from medvl_engine.io.dicom_results.source import DicomImageSource, dicom_image_source

__all__ = ["NON_DICOM_REMEDY", "ResultMaker", "require_dicom_slide", "result_maker"]

MANUFACTURER = "medvl"

NON_DICOM_REMEDY = (
    "convert it first with medvl_engine.export.dicom.dicomize.dicomize_slide, or write a "
    "TIFF, PNG or GeoJSON instead"
)
"""What the refusal of a non-DICOM slide suggests (the command line names ``--dicomize``)."""


@dataclass(frozen=True)
class ResultMaker:
    """Who made a result: ``model`` display name (never a path), the medvl ``version`` and
    the demo ``notice`` ("" for a real model)."""

    model: str
    version: str
    notice: str

    def equipment(self) -> dict[str, Any]:
        """highdicom's Enhanced General Equipment arguments."""
        return {
            "manufacturer": MANUFACTURER,
            "manufacturer_model_name": self.model[:64],
            "software_versions": self.version,
            "device_serial_number": "0",
        }

    def algorithm(self) -> Any:
        """An Algorithm Identification Sequence naming the model (family: AI)."""
        import highdicom as hd
        from pydicom.sr.codedict import codes

        return hd.AlgorithmIdentificationSequence(
            name=self.model[:64],
            family=codes.cid7162.ArtificialIntelligence,
            version=self.version,
        )

    def description(self, what: str) -> str:
        """A Content Description (at most 64 characters): the notice for a demo model."""
        return (self.notice or what)[:64]


def result_maker(model: str | Path | None) -> ResultMaker:
    """The :class:`ResultMaker` of a model given by registry name or folder."""
    from medvl_engine import __version__

    metadata = model_metadata(model)
    return ResultMaker(
        model=metadata["model"], version=f"medvl {__version__}", notice=metadata["notice"]
    )


def require_dicom_slide(
    slide: Any, output: Path, *, remedy: str = NON_DICOM_REMEDY
) -> DicomImageSource:
    """The DICOM level-0 image of ``slide`` (an open Slide or a path); one ExportError
    sentence ending in ``remedy`` when the slide is not a DICOM whole-slide image."""
    source_path = Path(os.fspath(getattr(slide, "path", slide)))
    vendor = getattr(slide, "vendor", None)
    refusal = (
        f"Cannot write {output.name}: DICOM outputs need a DICOM source and "
        f"{source_path.name} is not a DICOM whole-slide image; {remedy}."
    )
    if vendor not in (None, "dicom"):
        raise ExportError(refusal, output)
    if not source_path.is_dir() and source_path.suffix.lower() not in (".dcm", ".dicom"):
        if not _has_dicom_magic(source_path):
            raise ExportError(refusal, output)
    try:
        source = dicom_image_source(source_path)
    except MedVLError as error:
        raise ExportError(refusal, output) from error
    if not source.is_slide or source.geometry is None:
        raise ExportError(refusal, output)
    return source


def _has_dicom_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(132)[128:132] == b"DICM"
    except OSError:
        return False
