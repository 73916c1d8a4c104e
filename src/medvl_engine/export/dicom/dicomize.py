"""A non-DICOM whole-slide image (SVS, NDPI, TIFF) converted to a DICOM WSI series, so that
DICOM results can reference it.

DICOM results (Parametric Maps, bulk annotations) derive from a DICOM source: they join its
study and frame of reference and reference its level-0 instance. For a slide read by
tiffslide, :func:`dicomize_slide` writes that source with wsidicomizer (the ``dicom`` extra):
a new study and series of VL Whole Slide Microscopy instances, one per pyramid level of the
slide plus its thumbnail, each tile decoded with tiffslide and encoded again as JPEG baseline
(quality :data:`JPEG_QUALITY`). The converted level 0 has the slide's level-0 pixel grid
(the same columns and rows, pixel (x, y) at the same place), so a heatmap computed on the
slide (coords (x, y), level-0 px) lies on the converted series unchanged; the conversion is
refused when the grids differ, and a slide with a level that is not a power-of-two
downsample (:func:`first_odd_level`; wsidicomizer takes no other) before any conversion.
The label and overview (macro) images are left out, as is the metadata wsidicomizer calls
confidential (dates, device serial numbers): both can identify a patient.

The series is written into a folder of its own, never over the slide: the folder is built
under a temporary name beside it and renamed once complete (see
:func:`medvl_engine.common.atomic.atomic_directory`). A folder that already holds files is
refused rather than replaced; a finished conversion is itself a DICOM slide to open.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from medvl_engine.errors import ExportError, MedVLError, MissingDependencyError

__all__ = [
    "DICOMIZED_SUFFIX",
    "JPEG_QUALITY",
    "LEVEL_TOLERANCE",
    "check_dicomize_folder",
    "default_dicomized_folder",
    "dicomize_slide",
    "first_odd_level",
    "require_wsidicomizer",
]

DICOMIZED_SUFFIX = "_dicom"
"""The default folder of a converted slide is ``<slide stem>_dicom`` beside the output."""

JPEG_QUALITY = 90
"""JPEG quality (0-100) of the converted tiles."""

LEVEL_TOLERANCE = 0.01
"""How far (in log2 of the downsample) a level may be from a power of two and be kept."""


def require_wsidicomizer() -> None:
    """Raise MissingDependencyError (one sentence) unless wsidicomizer can be imported."""
    try:
        import wsidicomizer  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
    except ImportError as error:
        raise MissingDependencyError(
            "Converting a slide to DICOM needs wsidicomizer, which is not installed; "
            "install it with pip install wsidicomizer."
        ) from error


def default_dicomized_folder(slide: str | os.PathLike[str], output: str | os.PathLike[str]) -> Path:
    """``<slide stem>_dicom`` in the folder of ``output``: where ``--dicomize`` writes the
    converted series when no folder is given."""
    return Path(output).parent / f"{Path(slide).stem}{DICOMIZED_SUFFIX}"


def check_dicomize_folder(slide: str | os.PathLike[str], folder: str | os.PathLike[str]) -> None:
    """Refuse, with one sentence, a ``folder`` that is, holds or lies inside ``slide``, or
    that already holds files (ConfigError)."""
    from medvl_engine.errors import ConfigError
    from medvl_engine.export.input_guard import check_output_folder_spares_inputs

    folder = Path(folder)
    check_output_folder_spares_inputs(folder, [slide])
    if folder.is_dir() and any(folder.iterdir()):
        raise ConfigError(
            f"{folder} already holds files; open it as the slide if it is this slide's "
            "DICOM conversion, or name an empty or new folder for the conversion."
        )


def dicomize_slide(
    slide: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    workers: int | None = None,
) -> Path:
    """Convert ``slide`` (a file tiffslide reads: SVS, NDPI, pyramidal TIFF) to a DICOM WSI
    series in the new or empty ``folder`` (see the module docstring), with ``workers``
    threads (None: one per CPU). Returns ``folder``. Raises ConfigError for a folder that
    :func:`check_dicomize_folder` refuses, MissingDependencyError without wsidicomizer and
    ExportError when the slide cannot be converted; nothing is left behind on failure."""
    from medvl_engine.common.atomic import atomic_directory
    from medvl_engine.io.slide import open_slide

    slide, folder = Path(slide), Path(folder)
    check_dicomize_folder(slide, folder)
    require_wsidicomizer()
    with open_slide(slide) as opened:
        if getattr(opened, "vendor", None) == "dicom":
            raise ExportError(
                f"{slide.name} is already a DICOM whole-slide image; use it as it is.", slide
            )
        size = tuple(int(v) for v in opened.dimensions)
        odd = first_odd_level([float(d) for d in opened.level_downsamples])
        if odd is not None:
            width, height = (int(v) for v in opened.level_dimensions[odd])
            raise ExportError(
                f"Cannot convert {slide.name} to DICOM: its level {odd} ({width} x {height} "
                f"px) is a downsample of {float(opened.level_downsamples[odd]):.3f}, and "
                "the converter (wsidicomizer) takes powers of two only.",
                slide,
            )

    def fill(staging: Path) -> None:
        _convert(slide, staging, workers)
        _check_converted(slide, staging, size)

    if folder.is_dir():  # empty: atomic_directory moves it aside for the new one
        folder.rmdir()
    return atomic_directory(folder, fill, what="DICOM conversion")


def first_odd_level(level_downsamples: list[float]) -> int | None:
    """The first pyramid level whose downsample from level 0 (``level_downsamples``, level 0
    first) is not a power of two within :data:`LEVEL_TOLERANCE` in log2, as wsidicom
    requires of a pyramid; None when every level is one."""
    for index, downsample in enumerate(level_downsamples):
        step = math.log2(downsample)
        if abs(step - round(step)) > LEVEL_TOLERANCE:
            return index
    return None


def _convert(slide: Path, staging: Path, workers: int | None) -> None:
    """wsidicomizer's conversion of ``slide`` into ``staging``, tiles read with tiffslide."""
    from wsidicom.codec import JpegSettings  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from wsidicomizer import WsiDicomizer  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from wsidicomizer.wsidicomizer import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
        SourceIdentifier,
    )

    try:
        WsiDicomizer.convert(
            slide,
            staging,
            include_label=False,
            include_overview=False,
            include_confidential=False,
            encoding=JpegSettings(quality=JPEG_QUALITY),
            preferred_source=SourceIdentifier.TIFFSLIDE,
            workers=workers,
        )
    except MedVLError:
        raise
    except OSError:
        raise  # atomic_directory names the folder and the problem (disk full, read-only)
    except Exception as error:
        from medvl_engine.common.console import printable

        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = printable(text.split(". ")[0].rstrip("."))
        raise ExportError(
            f"Cannot convert {slide.name} to DICOM: {reason or type(error).__name__}.",
            slide,
        ) from error


def _check_converted(slide: Path, staging: Path, size: tuple[int, ...]) -> None:
    """Refuse a conversion whose level 0 is not a DICOM slide of the slide's ``size``."""
    from medvl_engine.io.dicom_results.source import dicom_image_source

    try:
        source = dicom_image_source(staging)
    except MedVLError as error:
        raise ExportError(
            f"Cannot convert {slide.name} to DICOM: the converted series cannot be read back.",
            slide,
        ) from error
    if not source.is_slide or source.geometry is None or tuple(source.size) != size:
        raise ExportError(
            f"Cannot convert {slide.name} to DICOM: the converted level 0 has "
            f"{source.size[0]} x {source.size[1]} px, not the slide's {size[0]} x {size[1]}.",
            slide,
        )
