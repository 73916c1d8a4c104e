"""What every DICOM result of a whole-slide image shares: its DICOM source, its maker and
its placement on the source.

Results are derived objects of the source's study, in its frame of reference, referencing
its level-0 instance (see :mod:`medvl_engine.io.dicom_results.source`). A map (parametric
map, segmentation) is a tiled image on the source's total pixel matrix: with s its cell
(level-0 px), pixel (c, r) covers level-0 px x in [x0 + c * s, x0 + (c + 1) * s), y likewise,
x0 = origin_x mod s (y alike) (:func:`grid_on_source`); its Pixel Spacing is s times the
source's, its origin the source's moved by (x0, y0) level-0 px along the source's Image
Orientation (Slide) (:func:`slide_placement`). A slide that is not
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

import numpy as np

from medvl_engine.common.model_label import model_metadata
from medvl_engine.errors import ExportError, MedVLError
from medvl_engine.io.dicom_results.source import DicomImageSource, dicom_image_source

__all__ = [
    "NON_DICOM_REMEDY",
    "ResultMaker",
    "grid_on_source",
    "require_dicom_slide",
    "result_maker",
    "slide_placement",
]

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

    def instance(
        self,
        *,
        label: str,
        what: str,
        series_number: int,
        series_uid: str | None = None,
        instance_number: int = 1,
        series_what: str | None = None,
    ) -> dict[str, Any]:
        """highdicom's arguments that name one result instance: its series (``series_uid``,
        a new UID when None) numbered ``series_number``, a new SOP Instance UID,
        ``instance_number``, the equipment (:meth:`equipment`), Content Label ``label``,
        Content Description ``what`` and Series Description ``series_what`` (default
        ``"medvl " + what``), each description the demo notice for a demo model
        (:meth:`description`)."""
        import highdicom as hd

        return {
            "series_instance_uid": series_uid or hd.UID(),
            "series_number": series_number,
            "sop_instance_uid": hd.UID(),
            "instance_number": instance_number,
            **self.equipment(),
            "content_label": label,
            "content_description": self.description(what),
            "series_description": self.description(series_what or f"medvl {what}"),
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


def grid_on_source(
    values: np.ndarray,
    origin_level0: tuple[int, int],
    cell: int,
    source_size: tuple[int, int],
    fill: float | int,
) -> tuple[np.ndarray, tuple[int, int]]:
    """(``values`` [rows, cols] placed on the source's cell grid [R, C], ``fill`` where no
    value lies; its top-left corner (x0, y0) in level-0 px) for a grid starting at
    ``origin_level0`` (x, y) with ``cell`` level-0 px cells on a source of ``source_size``
    (columns, rows) level-0 px: x0 = origin_x mod cell, C = ceil((columns - x0) / cell) (at
    least 1), value (r, c) at (r + origin_y div cell, c + origin_x div cell) (y alike).
    Values past the source's last cell are cut."""
    cell = int(cell)
    origin_x, origin_y = (int(v) for v in origin_level0)
    x0, y0 = origin_x % cell, origin_y % cell
    cols = max(1, -(-(int(source_size[0]) - x0) // cell))
    rows = max(1, -(-(int(source_size[1]) - y0) // cell))
    full = np.full((rows, cols), fill, dtype=values.dtype)
    r0, c0 = origin_y // cell, origin_x // cell
    fit_rows = max(0, min(values.shape[0], rows - r0))
    fit_cols = max(0, min(values.shape[1], cols - c0))
    full[r0 : r0 + fit_rows, c0 : c0 + fit_cols] = values[:fit_rows, :fit_cols]
    return full, (x0, y0)


def slide_placement(source: DicomImageSource, corner: tuple[int, int], cell: int) -> dict[str, Any]:
    """highdicom's ``pixel_measures``, ``plane_orientation`` and ``plane_positions`` of a
    one-frame-position tiled image whose pixel (1, 1) has its top-left corner at ``corner``
    (x0, y0) level-0 px of ``source`` and whose pixels are ``cell`` x ``cell`` level-0 px:
    Pixel Spacing = cell * the source's spacing (mm), the source's Slice Thickness (None
    when it states none), the source's Image Orientation (Slide), and Image Position (Slide)
    = the source's origin moved to ``corner`` (mm, the source's Frame of Reference)."""
    import highdicom as hd

    geometry = source.geometry
    assert geometry is not None  # require_dicom_slide refuses a source without one
    position = geometry.to_slide(np.asarray([corner], np.float64))[0]
    shared = source.dataset.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
    thickness = float(shared.get("SliceThickness", 0.0) or 0.0) or None
    return {
        "pixel_measures": hd.PixelMeasuresSequence(
            pixel_spacing=(geometry.spacing[0] * cell, geometry.spacing[1] * cell),
            slice_thickness=thickness,
        ),
        "plane_orientation": hd.PlaneOrientationSequence(
            coordinate_system="SLIDE",
            image_orientation=[*geometry.row_direction, *geometry.column_direction],
        ),
        "plane_positions": [
            hd.PlanePositionSequence(
                coordinate_system="SLIDE",
                image_position=tuple(float(v) for v in position),
                pixel_matrix_position=(1, 1),
            )
        ],
    }


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
