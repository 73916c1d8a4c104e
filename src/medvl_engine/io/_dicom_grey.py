"""The DICOM grayscale pipeline of one image: Modality LUT -> VOI -> MONOCHROME1 inversion.

PS3.3 C.11: Modality LUT (rescale or LUT sequence) -> VOI LUT (window centre/width with
LINEAR / LINEAR_EXACT / SIGMOID, or a VOI LUT sequence item, chosen by ``voi_index``) ->
MONOCHROME1 inversion (also for Presentation LUT Shape INVERSE; never twice). PALETTE COLOR
images go through their palette instead (:func:`palette_pixels`).

Values that would give a wrong picture are refused with a sentence naming the attribute: a
rescale slope or intercept that is NaN or infinite, or a slope of 0 (every pixel NaN or one
grey); a chosen window whose centre is not a number or whose width is not positive (LINEAR
needs at least 1), because the grey levels to show are then unknown (the sentence names the
file's other VOI choices when it has some); LUT items without a usable descriptor or table;
palette colour without its palette.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import CorruptFileError, MedVLError
from medvl_engine.io import _voi
from medvl_engine.io._dicom_values import (
    as_list,
    finite_number,
    first,
    printable,
    stated,
    whole_number,
)

if TYPE_CHECKING:
    from pydicom import Dataset

__all__ = ["display_pixels", "palette_pixels", "voi_options"]


def _text(value: Any) -> str | None:
    value = first(value)
    text = str(value).strip() if value is not None else ""
    return text or None


_VOI_FUNCTIONS = ("LINEAR", "LINEAR_EXACT", "SIGMOID")


def _rescale(path: Path, dataset: Any) -> tuple[float, float]:
    """(slope, intercept) of the Modality LUT by rescale, refused when not finite or slope 0."""
    numbers = []
    for keyword, words, default in (
        ("RescaleSlope", "rescale slope (Rescale Slope)", 1.0),
        ("RescaleIntercept", "rescale intercept (Rescale Intercept)", 0.0),
    ):
        value = first(dataset.get(keyword))
        if value is None or str(value).strip() == "":
            numbers.append(default)
            continue
        number = finite_number(value)
        if number is None:
            raise CorruptFileError(
                f"{path.name}: its {words} is {stated(value)}, not a finite number, so no pixel "
                "value can be computed; fix the file's rescale tags or re-export it.",
                path,
            )
        numbers.append(number)
    if numbers[0] == 0:
        raise CorruptFileError(
            f"{path.name}: its rescale slope (Rescale Slope) is 0, which would turn every pixel "
            "into the same grey; fix the file's rescale tags or re-export it.",
            path,
        )
    return numbers[0], numbers[1]


def _modality_values(path: Path, dataset: Any, stored: np.ndarray) -> np.ndarray:
    """Modality LUT (C.11.1): LUT sequence when present, else rescale slope/intercept."""
    sequence = dataset.get("ModalityLUTSequence")
    if sequence:
        return _lut(path, sequence[0], "Modality LUT Sequence", stored, _voi.apply_lut)
    slope, intercept = _rescale(path, dataset)
    return _voi.rescale(stored, slope, intercept)


def _lut(path: Path, item: Any, where: str, values: np.ndarray, apply: Any) -> np.ndarray:
    """Apply one LUT sequence item, with a sentence when its descriptor or data are unusable."""
    descriptor = [whole_number(v) for v in as_list(item.get("LUTDescriptor"))]
    data = item.get("LUTData")
    if len(descriptor) != 3 or any(v is None for v in descriptor) or data is None:
        raise CorruptFileError(
            f"{path.name}: its {where} has no valid LUT Descriptor or LUT Data, so its grey "
            "levels are unknown; fix the file or re-export it.",
            path,
        )
    if isinstance(data, bytes):
        entries = descriptor[0] or 65536
        table = np.frombuffer(
            data[: len(data) - len(data) % 2] if len(data) != entries else data,
            dtype="u1" if len(data) == entries else "<u2",
        ).tolist()
    else:
        table = [int(v) for v in as_list(data)]
    if not table:
        raise CorruptFileError(
            f"{path.name}: its {where} holds an empty table; fix the file or re-export it.", path
        )
    return np.asarray(apply(values, descriptor, table))


def _number_label(value: Any) -> str:
    number = finite_number(value)
    return f"{number:g}" if number is not None else stated(value)


def voi_options(dataset: Dataset) -> list[str]:
    """Human-readable VOI choices in ``voi_index`` order (windows, then LUT sequence items)."""
    centers = as_list(dataset.get("WindowCenter"))
    widths = as_list(dataset.get("WindowWidth"))
    explanations = as_list(dataset.get("WindowCenterWidthExplanation"))
    function = _text(dataset.get("VOILUTFunction")) or "LINEAR"
    choices = []
    for index, (center, width) in enumerate(zip(centers, widths, strict=False)):
        label = f"window {_number_label(center)}/{_number_label(width)} {function}"
        if index < len(explanations) and str(explanations[index]).strip():
            label += f" ({str(explanations[index]).strip()})"
        choices.append(label)
    for index, item in enumerate(dataset.get("VOILUTSequence") or []):
        explanation = _text(item.get("LUTExplanation"))
        choices.append(f"VOI LUT {index + 1}" + (f" ({explanation})" if explanation else ""))
    return choices


def _window(
    path: Path, dataset: Any, values: np.ndarray, index: int, choices: list[str]
) -> np.ndarray:
    """Window ``index`` of the file applied to ``values``, refused when it is not a window."""
    center_value = as_list(dataset.WindowCenter)[index]
    width_value = as_list(dataset.WindowWidth)[index]
    function = (_text(dataset.get("VOILUTFunction")) or "LINEAR").upper()
    if len(choices) > 1:
        remedy = f"pick another VOI choice (0..{len(choices) - 1}) or fix the file's window tags."
    else:
        remedy = "fix the file's Window Center and Window Width or re-export it."
    if function not in _VOI_FUNCTIONS:
        raise CorruptFileError(
            f"{path.name}: its VOI LUT Function {printable(function) or 'value'} is not LINEAR, "
            f"LINEAR_EXACT or SIGMOID, so the grey levels to show are unknown; {remedy}",
            path,
        )
    center, width = finite_number(center_value), finite_number(width_value)
    if center is None:
        raise CorruptFileError(
            f"{path.name}: its window centre (Window Center) is {stated(center_value)}, not a "
            f"number, so the grey levels to show are unknown; {remedy}",
            path,
        )
    smallest = 1.0 if function == "LINEAR" else 0.0
    if width is None or width < smallest or width <= 0:
        bound = "of at least 1" if function == "LINEAR" else "above 0"
        raise CorruptFileError(
            f"{path.name}: its window width (Window Width) is {stated(width_value)}, where "
            f"{function} needs a number {bound}, so the grey levels to show are unknown; "
            f"{remedy}",
            path,
        )
    return _voi.voi_window(values, center, width, function)


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
        len(as_list(dataset.get("WindowCenter"))), len(as_list(dataset.get("WindowWidth")))
    )
    if voi_index < windows:
        return _window(path, dataset, values, voi_index, choices), choices[voi_index]
    item = dataset.VOILUTSequence[voi_index - windows]
    where = f"VOI LUT Sequence item {voi_index - windows + 1}"
    return _lut(path, item, where, values, _voi.voi_lut), choices[voi_index]


def display_pixels(
    path: Path, dataset: Dataset, stored: np.ndarray, photometric: str | None, voi_index: int
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
    values = _modality_values(path, dataset, inputs)
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


def palette_pixels(path: Path, dataset: Dataset, indices: np.ndarray) -> np.ndarray:
    """PALETTE COLOR indices [H, W] -> luminance of their palette colours, float32 in [0, 1]."""
    has_palette = any(
        keyword in dataset
        for keyword in ("RedPaletteColorLookupTableData", "SegmentedRedPaletteColorLookupTableData")
    )
    if not has_palette:
        raise CorruptFileError(
            f"{path.name}: says its pixels are palette colours (PALETTE COLOR) but holds no "
            "palette (Red, Green, Blue Palette Color Lookup Table Data), so its grey levels are "
            "unknown; re-export the image as MONOCHROME2.",
            path,
        )
    from pydicom.pixels.processing import apply_color_lut

    try:
        rgb = np.asarray(apply_color_lut(indices, dataset))
    except Exception as error:  # a palette whose descriptor and data disagree
        raise CorruptFileError(
            f"{path.name}: its colour palette (Palette Color Lookup Tables) is damaged, so its "
            "grey levels are unknown; re-export the image as MONOCHROME2.",
            path,
        ) from error
    top = 255.0 if rgb.dtype.itemsize == 1 else 65535.0
    luminance = rgb[..., :3].astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    return np.asarray(np.clip(luminance / top, 0.0, 1.0).astype(np.float32))
