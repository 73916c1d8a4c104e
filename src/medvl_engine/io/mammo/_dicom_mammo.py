"""DICOM mammograms: reading, decoding and the view's metadata.

Stored values go through the grayscale pipeline of :mod:`medvl_engine.io.mammo._dicom_grey`
(Modality LUT -> VOI -> MONOCHROME1 inversion, or the palette of PALETTE COLOR images),
which refuses values that would give a wrong picture. Patient identifiers are kept apart
from the other properties.

The memory decoding takes (every frame, then the grey pipeline of one) is checked against the
decode budget from the header, before pydicom decodes anything. Pixel data whose length
contradicts the header (truncated, or a Samples per Pixel that does
not match) is refused in words before it is decoded. A pixel spacing that is not two positive
numbers only matters for measurements, so the image is shown with its spacing treated as
unknown and the ``medvl.pixel_spacing_warning`` property saying why. A placeholder (fewer
than 2 rows or columns, as some archives store for For Processing views) is refused for pixel
reads; with ``placeholder_ok`` its header facts are still returned with ``pixel_problem``
saying what is wrong.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.common.reason import error_reason
from medvl_engine.errors import (
    CorruptFileError,
    MissingDependencyError,
    UnsupportedFormatError,
)
from medvl_engine.io._dicom_values import (
    as_list,
    finite_number,
    first,
    read_problem,
    stated,
    whole_number,
)
from medvl_engine.io.limits import check_decode_bytes
from medvl_engine.io.mammo._dicom_grey import display_pixels, palette_pixels, voi_options
from medvl_engine.io.mammo._mammogram import VIEW_NAMES, Mammogram, blank_warning, parse_file_name

__all__ = ["PRIVATE_DICOM_KEYWORDS", "display_pixels", "open_dicom_mammogram", "voi_options"]

PRIVATE_DICOM_KEYWORDS = (
    "PatientName",
    "PatientID",
    "PatientBirthDate",
    "AccessionNumber",
    "OtherPatientIDs",
    "InstitutionName",
    "ReferringPhysicianName",
    "StudyID",
    "StudyInstanceUID",
)
"""DICOM attributes that identify a patient; kept apart and shown only on request."""


_VIEW_MEANINGS = (
    ("medio-lateral oblique", "MLO"),
    ("mediolateral oblique", "MLO"),
    ("latero-medial oblique", "LMO"),
    ("cranio-caudal exaggerated laterally", "XCCL"),
    ("cranio-caudal exaggerated medially", "XCCM"),
    ("exaggerated cranio-caudal", "XCCL"),
    ("cranio-caudal", "CC"),
    ("craniocaudal", "CC"),
    ("medio-lateral", "ML"),
    ("mediolateral", "ML"),
    ("latero-medial", "LM"),
    ("lateromedial", "LM"),
)

# Transfer syntax UID prefix -> the package whose plugin decodes it.
_DECODER_PACKAGES = (
    ("1.2.840.10008.1.2.4.5", "pylibjpeg-libjpeg"),
    ("1.2.840.10008.1.2.4.7", "pylibjpeg-libjpeg"),
    ("1.2.840.10008.1.2.4.8", "pylibjpeg-libjpeg (JPEG-LS)"),
    ("1.2.840.10008.1.2.4.9", "pylibjpeg-openjpeg"),
    ("1.2.840.10008.1.2.4.20", "pylibjpeg-openjpeg"),
    ("1.2.840.10008.1.2.5", "pylibjpeg-rle"),
)
_DAMAGED = "the file is damaged or truncated, re-copy or re-export it."
_MISMATCHED = "the header does not describe the pixels, re-export the file."


def _text(value: Any) -> str | None:
    value = first(value)
    text = str(value).strip() if value is not None else ""
    return text or None


def _decoder_package(transfer_syntax: str) -> str | None:
    for prefix, package in _DECODER_PACKAGES:
        if transfer_syntax.startswith(prefix):
            return package
    return None


def _read_dicom(path: Path) -> Any:
    import pydicom
    from pydicom.errors import InvalidDicomError

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dataset = pydicom.dcmread(path)
            for _ in dataset.iterall():  # convert every value now, so damage surfaces here
                pass
    except InvalidDicomError as error:
        raise UnsupportedFormatError(
            f"{path.name}: not a DICOM file (its header has no DICM marker); give a DICOM, PNG "
            "or TIFF mammogram.",
            path,
        ) from error
    except Exception as error:
        raise CorruptFileError(
            f"{path.name}: {read_problem(error)}; re-copy or re-export it.", path
        ) from error
    for warning in caught:
        if "end of file" in str(warning.message).lower():
            raise CorruptFileError(
                f"{path.name}: the DICOM file ends early (truncated); re-copy or re-export it.",
                path,
            )
    return dataset


def _image_size(path: Path, dataset: Any) -> tuple[int, int]:
    """(rows, columns) the header states, refused in words when absent or not a count."""
    sizes = []
    for keyword, meaning in (("Rows", "image height"), ("Columns", "image width")):
        value = dataset.get(keyword)
        number = whole_number(value)
        if number is None or number < 0:
            given = "does not give" if value in (None, "") else f"gives {stated(value)} as"
            raise CorruptFileError(
                f"{path.name}: its header {given} its {meaning} in pixels ({keyword}); {_DAMAGED}",
                path,
            )
        sizes.append(number)
    return sizes[0], sizes[1]


def _placeholder_problem(rows: int, columns: int) -> str | None:
    """What is wrong with pixels too few to be a view, or None for a real image."""
    if rows >= 2 and columns >= 2:
        return None
    return (
        f"holds a {rows} x {columns} pixel placeholder (rows x columns), not an image; its "
        "header describes the view but the pixels were left out, use the full image from the "
        "archive or the modality"
    )


_PIPELINE_BYTES = 14
"""Bytes per pixel of one frame the grey pipeline holds besides the decoded frames, for
samples of up to 16 bits (run through a table of levels): level offsets (4), the float32
display image (4), level counts and the frame's own copy (6)."""

_FLOAT_PIPELINE_BYTES = 48
"""The same for wider or float samples, run pixel by pixel in float64 (values, window
branches and clipping: five float64 arrays, the float32 display image and a copy)."""


def _check_decode_budget(path: Path, dataset: Any, rows: int, columns: int) -> None:
    """Refuse, from the header alone, pixel data that would take more memory to decode and
    convert than one decode may use: every frame is decoded at once, then one is converted."""
    samples = max(whole_number(dataset.get("SamplesPerPixel")) or 1, 1)
    bits = max(whole_number(dataset.get("BitsAllocated")) or 8, 1)
    frames = max(whole_number(dataset.get("NumberOfFrames")) or 1, 1)
    decoded = frames * samples * -(-bits // 8)
    pipeline = _PIPELINE_BYTES
    if bits > 16 or samples > 1 or "FloatPixelData" in dataset:
        pipeline = _FLOAT_PIPELINE_BYTES + (24 if samples > 1 else 0)  # + float64 colour
    what = "the mammogram" if frames == 1 else f"the mammogram ({frames:,} frames decoded at once)"
    check_decode_bytes(path, columns, rows, decoded + pipeline, what)


def _check_native_length(path: Path, dataset: Any, rows: int, columns: int) -> None:
    """Uncompressed Pixel Data must hold the bytes its header describes (else wrong pixels)."""
    from pydicom.uid import UID

    syntax = UID(str(getattr(dataset.file_meta, "TransferSyntaxUID", "") or ""))
    photometric = (_text(dataset.get("PhotometricInterpretation")) or "").upper()
    data = dataset.get("PixelData")
    if syntax.is_compressed or not isinstance(data, bytes) or photometric == "YBR_FULL_422":
        return
    samples = whole_number(dataset.get("SamplesPerPixel")) or 1
    bits = whole_number(dataset.get("BitsAllocated")) or 8
    frames = whole_number(dataset.get("NumberOfFrames")) or 1
    if bits == 1:
        return  # packed bits: pydicom checks these itself
    frame_bytes = rows * columns * samples * -(-bits // 8)
    expected, length = frame_bytes * frames, len(data)
    if samples in (1, 3):
        other = 4 - samples
        if length in (expected // samples * other, expected // samples * other + 1):
            raise CorruptFileError(
                f"{path.name}: its header says {samples} sample{'s' if samples > 1 else ''} "
                f"per pixel (Samples per Pixel) but its pixel data holds {other}; {_MISMATCHED}",
                path,
            )
    if length < expected:
        raise CorruptFileError(
            f"{path.name}: holds {length} bytes of pixel data where its {columns} x {rows} "
            f"image of {bits}-bit samples needs {expected}; {_DAMAGED}",
            path,
        )
    if frame_bytes and length - expected >= frame_bytes:
        raise CorruptFileError(
            f"{path.name}: holds {length} bytes of pixel data, more than the {expected} its "
            f"{columns} x {rows} image needs; {_MISMATCHED}",
            path,
        )


def _stored_pixels(path: Path, dataset: Any) -> np.ndarray:
    """Stored values [H, W] (first frame of a multi-frame image; palette indices for
    PALETTE COLOR), decoded by pydicom; colour images give their luminance."""
    transfer_syntax = str(getattr(dataset.file_meta, "TransferSyntaxUID", ""))
    missing = _missing_decoder(transfer_syntax)
    if missing is not None:
        raise MissingDependencyError(f"{path.name}: {missing}", path)
    try:
        pixels = dataset.pixel_array
    except Exception as error:
        from pydicom.uid import UID

        syntax = UID(transfer_syntax).name if transfer_syntax else "its"
        reason = error_reason(error)  # the decoder's own words, folded into one line
        raise CorruptFileError(
            f"{path.name}: the {syntax} pixel data could not be decoded"
            f"{f' ({reason})' if reason else ''}; {_DAMAGED}",
            path,
        ) from error
    pixels = np.asarray(pixels)
    frames = whole_number(dataset.get("NumberOfFrames")) or 1
    if frames > 1:
        pixels = pixels[0]
    if pixels.ndim == 3 and pixels.shape[-1] in (3, 4):
        pixels = pixels[..., :3].astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    if pixels.ndim != 2:
        shape = " x ".join(str(n) for n in pixels.shape)
        raise UnsupportedFormatError(
            f"{path.name}: its pixel data decodes to {shape} values, not one grayscale or "
            "colour view; give a single mammographic view.",
            path,
        )
    return np.asarray(pixels)


def _missing_decoder(transfer_syntax: str) -> str | None:
    """Why pixels of this transfer syntax cannot be decoded here, or None when they can."""
    from pydicom.pixels.decoders.base import get_decoder
    from pydicom.uid import UID

    if not transfer_syntax:
        return None
    name = UID(transfer_syntax).name
    try:
        decoder = get_decoder(transfer_syntax)
    except NotImplementedError:
        return (
            f"its transfer syntax {name} ({transfer_syntax}) has no pixel decoder in pydicom; "
            "convert the file to an uncompressed or JPEG 2000 syntax (e.g. gdcmconv --raw)."
        )
    except Exception:  # not a pixel transfer syntax pydicom knows: let decoding report it
        return None
    if decoder.is_available:
        return None
    package = _decoder_package(transfer_syntax) or "pylibjpeg with its plugins"
    return (
        f"its transfer syntax {name} ({transfer_syntax}) needs a decoder that is not "
        f"installed; install {package} (pip install {package.split()[0]})."
    )


def _view_from_dataset(dataset: Any) -> str | None:
    position = _text(dataset.get("ViewPosition"))
    if position:
        return VIEW_NAMES.get(position.upper(), position.upper())
    for item in dataset.get("ViewCodeSequence") or []:
        meaning = (_text(item.get("CodeMeaning")) or "").lower()
        for words, view in _VIEW_MEANINGS:
            if words in meaning:
                return view
        if meaning:
            return meaning
    return None


def _pixel_spacing(dataset: Any) -> tuple[tuple[float, float] | None, str | None]:
    """((row_mm, col_mm) or None, a warning when the stated spacing is impossible)."""
    for keyword, words in (
        ("PixelSpacing", "Pixel Spacing"),
        ("ImagerPixelSpacing", "Imager Pixel Spacing"),
    ):
        value = dataset.get(keyword)
        if value is None or value == "":
            continue
        numbers = [finite_number(v) for v in as_list(value)]
        positive = [n for n in numbers if n is not None and n > 0]
        if len(numbers) == 2 and len(positive) == 2:
            return (positive[0], positive[1]), None
        return None, (
            f"{words} {stated(value)} mm is not two positive numbers, so the pixel size is "
            "treated as unknown and no distance in mm can be measured"
        )
    return None, None


def open_dicom_mammogram(path: Path, voi_index: int, placeholder_ok: bool = False) -> Mammogram:
    """Read a DICOM mammogram: stored values through the grayscale pipeline, plus metadata.

    ``placeholder_ok`` returns a placeholder (fewer than 2 rows or columns) with its header
    facts and ``pixel_problem`` set, where it is otherwise refused.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydicom's value warnings: problems become sentences
        return _open(path, voi_index, placeholder_ok)


def _open(path: Path, voi_index: int, placeholder_ok: bool) -> Mammogram:
    dataset = _read_dicom(path)
    if "PixelData" not in dataset and "FloatPixelData" not in dataset:
        kind = _text(dataset.get("Modality")) or "non-image"
        raise UnsupportedFormatError(
            f"{path.name}: this DICOM ({kind}) has no Pixel Data, so it is not an image; "
            "open the image instance of the study instead.",
            path,
        )
    rows, columns = _image_size(path, dataset)
    problem = _placeholder_problem(rows, columns)
    if problem and not placeholder_ok:
        raise UnsupportedFormatError(f"{path.name}: {problem}.", path)
    _check_decode_budget(path, dataset, rows, columns)
    _check_native_length(path, dataset, rows, columns)
    stored = _stored_pixels(path, dataset)
    problem = problem or _placeholder_problem(*stored.shape)
    if problem and not placeholder_ok:
        raise UnsupportedFormatError(f"{path.name}: {problem}.", path)
    photometric = _text(dataset.get("PhotometricInterpretation"))
    if (photometric or "").upper() == "PALETTE COLOR":
        display, voi_name, choices = palette_pixels(path, dataset, stored), "palette", []
    else:
        display, voi_name = display_pixels(path, dataset, stored, photometric, voi_index)
        choices = voi_options(dataset)

    name_laterality, name_view = parse_file_name(path.name)
    laterality = _text(dataset.get("ImageLaterality")) or _text(dataset.get("Laterality"))
    laterality = laterality.upper() if laterality else None
    if laterality not in ("L", "R"):
        laterality = name_laterality
    view = _view_from_dataset(dataset) or name_view
    pixel_spacing, spacing_warning = _pixel_spacing(dataset)

    properties: dict[str, Any] = {
        "transfer_syntax": str(getattr(dataset.file_meta, "TransferSyntaxUID", "")),
        "sop_class": str(dataset.get("SOPClassUID", "")),
        "bits_stored": whole_number(dataset.get("BitsStored")) or 0,
        "manufacturer": _text(dataset.get("Manufacturer")),
        "presentation_lut_shape": _text(dataset.get("PresentationLUTShape")),
        "medvl.pixel_spacing_warning": spacing_warning,
        "medvl.blank_warning": None if problem else blank_warning(stored),
    }
    private = {
        keyword: str(dataset.get(keyword))
        for keyword in PRIVATE_DICOM_KEYWORDS
        if dataset.get(keyword) not in (None, "")
    }
    return Mammogram(
        path=path,
        pixels=display,
        laterality=laterality,
        view=view,
        pixel_spacing=pixel_spacing,
        modality=_text(dataset.get("Modality")),
        photometric=photometric,
        presentation_intent=_text(dataset.get("PresentationIntentType")),
        voi=voi_name,
        voi_choices=choices,
        properties={k: v for k, v in properties.items() if v not in (None, "")},
        private_properties=private,
        pixel_problem=f"{path.name}: {problem}." if problem else None,
    )
