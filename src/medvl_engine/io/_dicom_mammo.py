"""DICOM mammograms: decoding, the grayscale pipeline and the view's metadata.

Order of the pipeline (PS3.3 C.11): Modality LUT (rescale or LUT sequence) ->
VOI LUT (window centre/width with LINEAR / LINEAR_EXACT / SIGMOID, or a VOI LUT
sequence item, chosen by ``voi_index``) -> MONOCHROME1 inversion. Patient
identifiers are kept apart from the other properties.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine._reason import error_reason
from medvl_engine.errors import (
    CorruptFileError,
    MedVLError,
    MissingDependencyError,
    UnsupportedFormatError,
)
from medvl_engine.io import _voi
from medvl_engine.io._mammogram import VIEW_NAMES, Mammogram, parse_file_name

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


def _first(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return value[0] if len(value) else None
    return value


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return list(value)
    return [value]


def _text(value: Any) -> str | None:
    value = _first(value)
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
    except InvalidDicomError as error:
        raise UnsupportedFormatError(
            f"{path.name}: not a DICOM file ({error}); give a DICOM, PNG or TIFF mammogram.",
            path,
        ) from error
    except Exception as error:
        raise CorruptFileError(
            f"{path.name}: the DICOM header could not be read ({error}); the file is damaged "
            "or truncated, re-copy or re-export it.",
            path,
        ) from error
    for warning in caught:
        if "end of file" in str(warning.message).lower():
            raise CorruptFileError(
                f"{path.name}: the DICOM file ends early (truncated); re-copy or re-export it.",
                path,
            )
    return dataset


def _stored_pixels(path: Path, dataset: Any) -> np.ndarray:
    """Stored values [H, W] (first frame of a multi-frame image), decoded by pydicom."""
    if "PixelData" not in dataset and "FloatPixelData" not in dataset:
        kind = _text(dataset.get("Modality")) or "non-image"
        raise UnsupportedFormatError(
            f"{path.name}: this DICOM ({kind}) has no Pixel Data, so it is not an image; "
            "open the image instance of the study instead.",
            path,
        )
    transfer_syntax = str(getattr(dataset.file_meta, "TransferSyntaxUID", ""))
    missing = _missing_decoder(transfer_syntax)
    if missing is not None:
        raise MissingDependencyError(f"{path.name}: {missing}", path)
    try:
        pixels = dataset.pixel_array
    except Exception as error:
        detail = error_reason(error) or type(error).__name__
        raise CorruptFileError(
            f"{path.name}: the pixel data could not be decoded ({detail}); the file is "
            "damaged or truncated, re-copy or re-export it.",
            path,
        ) from error
    pixels = np.asarray(pixels)
    frames = int(_first(dataset.get("NumberOfFrames")) or 1)
    if frames > 1:
        pixels = pixels[0]
    if pixels.ndim == 3:
        if pixels.shape[-1] not in (3, 4):
            raise UnsupportedFormatError(
                f"{path.name}: pixel array of shape {pixels.shape} is not a 2-D image; "
                "give a single mammographic view.",
                path,
            )
        pixels = pixels[..., :3].astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    if pixels.ndim != 2 or min(pixels.shape) < 2:
        raise UnsupportedFormatError(
            f"{path.name}: pixel array of shape {pixels.shape} is not a 2-D image; "
            "give a single mammographic view.",
            path,
        )
    return pixels


def _missing_decoder(transfer_syntax: str) -> str | None:
    """Why pixels of this transfer syntax cannot be decoded here, or None when they can."""
    from pydicom.pixels import get_decoder
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


def _modality_values(dataset: Any, stored: np.ndarray) -> np.ndarray:
    """Modality LUT (C.11.1): LUT sequence when present, else rescale slope/intercept."""
    sequence = dataset.get("ModalityLUTSequence")
    if sequence:
        item = sequence[0]
        return _voi.apply_lut(stored, list(item.LUTDescriptor), _lut_data(item))
    slope = _first(dataset.get("RescaleSlope"))
    intercept = _first(dataset.get("RescaleIntercept"))
    return _voi.rescale(
        stored,
        float(slope) if slope not in (None, "") else 1.0,
        float(intercept) if intercept not in (None, "") else 0.0,
    )


def _lut_data(item: Any) -> list[int]:
    data = item.get("LUTData")
    if data is None:
        raise ValueError("a LUT sequence item has no LUT Data")
    if isinstance(data, bytes):
        entries = int(item.LUTDescriptor[0]) or 65536
        return np.frombuffer(data, dtype="u1" if len(data) == entries else "<u2").tolist()
    return [int(v) for v in _as_list(data)]


def voi_options(dataset: Any) -> list[str]:
    """Human-readable VOI choices in ``voi_index`` order (windows, then LUT sequence items)."""
    centers = _as_list(dataset.get("WindowCenter"))
    widths = _as_list(dataset.get("WindowWidth"))
    explanations = _as_list(dataset.get("WindowCenterWidthExplanation"))
    function = _text(dataset.get("VOILUTFunction")) or "LINEAR"
    choices = []
    for index, (center, width) in enumerate(zip(centers, widths, strict=False)):
        label = f"window {float(center):g}/{float(width):g} {function}"
        if index < len(explanations) and str(explanations[index]).strip():
            label += f" ({str(explanations[index]).strip()})"
        choices.append(label)
    for index, item in enumerate(dataset.get("VOILUTSequence") or []):
        explanation = _text(item.get("LUTExplanation"))
        choices.append(f"VOI LUT {index + 1}" + (f" ({explanation})" if explanation else ""))
    return choices


def _apply_voi(
    path: Path, dataset: Any, values: np.ndarray, voi_index: int, present: np.ndarray | None
) -> tuple[np.ndarray, str]:
    """VOI of modality ``values``; ``present`` marks the entries that occur in the image."""
    choices = voi_options(dataset)
    if not choices:
        occurring = values if present is None else values[present]
        low, high = float(occurring.min()), float(occurring.max())
        if high <= low:
            return np.zeros_like(values, dtype=np.float64), "full range"
        return (values - low) / (high - low), "full range"
    if not 0 <= voi_index < len(choices):
        raise MedVLError(
            f"{path.name}: VOI choice {voi_index} does not exist; this file offers "
            f"{len(choices)} ({'; '.join(choices)}), pick 0..{len(choices) - 1}.",
            path,
        )
    windows = min(
        len(_as_list(dataset.get("WindowCenter"))), len(_as_list(dataset.get("WindowWidth")))
    )
    try:
        if voi_index < windows:
            center = float(_as_list(dataset.WindowCenter)[voi_index])
            width = float(_as_list(dataset.WindowWidth)[voi_index])
            function = _text(dataset.get("VOILUTFunction")) or "LINEAR"
            return _voi.voi_window(values, center, width, function), choices[voi_index]
        item = dataset.VOILUTSequence[voi_index - windows]
        return _voi.voi_lut(values, list(item.LUTDescriptor), _lut_data(item)), choices[voi_index]
    except (ValueError, TypeError, AttributeError) as error:
        raise CorruptFileError(
            f"{path.name}: its VOI attributes are invalid ({error}); pick another VOI "
            "choice or fix the file's window tags.",
            path,
        ) from error


def display_pixels(
    path: Path, dataset: Any, stored: np.ndarray, photometric: str | None, voi_index: int
) -> tuple[np.ndarray, str]:
    """Stored values [H, W] -> display float32 [H, W]: Modality LUT -> VOI -> MONOCHROME1.

    Integer images (at most 2**16 + 1 distinct levels between their extremes)
    run the pipeline once per level on a lookup table and then index it, which
    gives the same values as running it per pixel at a fraction of the cost.
    """
    use_table = np.issubdtype(stored.dtype, np.integer) and stored.size > 0
    if use_table:
        low, high = int(stored.min()), int(stored.max())
        use_table = high - low <= 2**16
    if use_table:
        if low == 0:
            offsets = stored
        elif np.issubdtype(stored.dtype, np.unsignedinteger):
            offsets = stored - stored.dtype.type(low)  # every value >= low: no wrap-around
        else:
            offsets = stored.astype(np.int32) - np.int32(low)
        inputs = np.arange(low, high + 1, dtype=np.float64)
        present = None
        if not voi_options(dataset):  # the full-range window needs the levels that occur
            present = np.bincount(offsets.ravel(), minlength=inputs.size) > 0
    else:
        inputs, present = stored, None
    try:
        values = _modality_values(dataset, inputs)
    except (ValueError, TypeError, AttributeError) as error:
        raise CorruptFileError(
            f"{path.name}: its Modality LUT is invalid ({error}); fix or re-export the file.",
            path,
        ) from error
    display, voi_name = _apply_voi(path, dataset, values, voi_index, present)
    # MONOCHROME1 shows low values white; its Presentation LUT Shape is INVERSE by rule
    # (PS3.3 C.11.6.1), so the two ask for one inversion, which INVERSE alone also asks for.
    shape = (_text(dataset.get("PresentationLUTShape")) or "").upper()
    if photometric == "MONOCHROME1" or shape == "INVERSE":
        display = _voi.invert_monochrome1(display)
    display = np.clip(display, 0.0, 1.0).astype(np.float32)
    if use_table:
        display = display[offsets]
    return display, voi_name


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


def open_dicom_mammogram(path: Path, voi_index: int) -> Mammogram:
    """Read a DICOM mammogram: stored values through the grayscale pipeline, plus metadata."""
    dataset = _read_dicom(path)
    stored = _stored_pixels(path, dataset)
    photometric = _text(dataset.get("PhotometricInterpretation"))
    display, voi_name = display_pixels(path, dataset, stored, photometric, voi_index)

    name_laterality, name_view = parse_file_name(path.name)
    laterality = _text(dataset.get("ImageLaterality")) or _text(dataset.get("Laterality"))
    laterality = laterality.upper() if laterality else None
    if laterality not in ("L", "R"):
        laterality = name_laterality
    view = _view_from_dataset(dataset) or name_view
    spacing = dataset.get("PixelSpacing") or dataset.get("ImagerPixelSpacing")
    pixel_spacing = None
    if spacing is not None and len(_as_list(spacing)) >= 2:
        row_mm, col_mm = (float(v) for v in _as_list(spacing)[:2])
        pixel_spacing = (row_mm, col_mm)

    properties: dict[str, Any] = {
        "transfer_syntax": str(getattr(dataset.file_meta, "TransferSyntaxUID", "")),
        "sop_class": str(dataset.get("SOPClassUID", "")),
        "bits_stored": int(_first(dataset.get("BitsStored")) or 0),
        "manufacturer": _text(dataset.get("Manufacturer")),
        "presentation_lut_shape": _text(dataset.get("PresentationLUTShape")),
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
        voi_choices=voi_options(dataset),
        properties={k: v for k, v in properties.items() if v not in (None, "")},
        private_properties=private,
    )
