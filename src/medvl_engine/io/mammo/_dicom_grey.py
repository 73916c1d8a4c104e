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

What was read is checked too: a LUT whose data holds fewer entries than its descriptor
declares; a Modality LUT that covers less than half of the stored values the image holds (the
rest would be clamped to its ends); a rescale that overflows to infinity; and any step that
turns an image of several stored values into one grey (a window or LUT far off the image's
values, an intercept that swallows them) is refused in a sentence naming the step, rather
than shown as a blank picture.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import CorruptFileError, MedVLError
from medvl_engine.io._dicom_values import (
    as_list,
    finite_number,
    first,
    printable,
    stated,
    whole_number,
)
from medvl_engine.io.mammo import _voi

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


def _modality_values(
    path: Path, dataset: Any, stored: np.ndarray, stored_range: tuple[float, float]
) -> np.ndarray:
    """Modality LUT (C.11.1): LUT sequence when present, else rescale slope/intercept.

    ``stored_range`` is (lowest, highest) stored value of the image: a LUT must cover most
    of it, and the rescaled values must stay finite."""
    sequence = dataset.get("ModalityLUTSequence")
    if sequence:
        _check_lut_covers(path, sequence[0], stored_range)
        return _lut(path, sequence[0], "Modality LUT Sequence", stored, _voi.apply_lut)
    slope, intercept = _rescale(path, dataset)
    with np.errstate(over="ignore", invalid="ignore"):
        values = _voi.rescale(stored, slope, intercept)
    if not np.isfinite(values).all():
        low, high = stored_range
        raise CorruptFileError(
            f"{path.name}: its rescale slope {slope:g} and intercept {intercept:g} (Rescale "
            f"Slope, Rescale Intercept) take its stored values {low:g}..{high:g} beyond the "
            "largest number a computer holds, so no pixel value can be computed; fix the "
            "file's rescale tags or re-export it.",
            path,
        )
    return values


_MIN_LUT_COVER = 0.5
"""Share of the image's stored value range a Modality LUT must cover (the rest is clamped)."""


def _check_lut_covers(path: Path, item: Any, stored_range: tuple[float, float]) -> None:
    """Refuse a Modality LUT whose inputs cover less than half of the stored values' range:
    every value past its ends takes the end's entry, so the image would lose its contrast."""
    descriptor = [whole_number(v) for v in as_list(item.get("LUTDescriptor"))]
    if len(descriptor) != 3 or descriptor[0] is None or descriptor[1] is None:
        return  # _lut refuses it in words
    entries, start = int(descriptor[0] or 65536), int(descriptor[1])
    low, high = stored_range
    span = high - low + 1
    covered = min(high, start + entries - 1) - max(low, start) + 1
    if span > 2 and max(covered, 0) < _MIN_LUT_COVER * span:
        raise CorruptFileError(
            f"{path.name}: its Modality LUT Sequence maps stored values {start:,}.."
            f"{start + entries - 1:,} ({entries:,} entries, LUT Descriptor), but the image's "
            f"stored values run {low:,.0f}..{high:,.0f}, so most pixels would take one grey; "
            "the file is damaged, fix its Modality LUT or re-export it.",
            path,
        )


_FLAT = 1.0 / 255.0
"""Display spread under which an image shows as one grey (less than one 8-bit level)."""


def _spread(values: np.ndarray, present: np.ndarray | None) -> float:
    occurring = values if present is None else values[present]
    if occurring.size == 0:
        return 0.0
    return float(np.max(occurring)) - float(np.min(occurring))


def _check_not_flat(
    path: Path,
    stored_range: tuple[float, float],
    values: np.ndarray,
    present: np.ndarray | None,
    step: str,
    limit: float,
    remedy: str,
) -> None:
    """Refuse when ``step`` turned stored values that differ into (nearly) one value."""
    low, high = stored_range
    if high > low and _spread(values, present) <= limit:
        raise CorruptFileError(
            f"{path.name}: {step} turns its stored values {low:,.0f}..{high:,.0f} into one "
            f"grey, so the image would show blank; {remedy}",
            path,
        )


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
    entries = int(descriptor[0] or 65536)
    if isinstance(data, bytes):
        bits = int(descriptor[2] or 16)
        if bits <= 8 and len(data) in (entries, entries + 1):  # 8-bit entries, packed
            table = np.frombuffer(data[:entries], dtype="u1").tolist()
        else:
            table = np.frombuffer(data[: len(data) - len(data) % 2], dtype="<u2").tolist()
    else:
        table = [int(v) for v in as_list(data)]
    if not table:
        raise CorruptFileError(
            f"{path.name}: its {where} holds an empty table; fix the file or re-export it.", path
        )
    if len(table) < entries:
        raise CorruptFileError(
            f"{path.name}: its {where} declares {entries:,} entries (LUT Descriptor) but its "
            f"LUT Data holds {len(table):,}, so the grey levels of most values are unknown; "
            "the file is damaged, re-copy or re-export it.",
            path,
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


def _voi_words(voi_name: str) -> str:
    """The chosen VOI as the subject of a sentence: 'its VOI window 40/400 LINEAR'."""
    return f"its {voi_name}" if voi_name.startswith("VOI LUT") else f"its VOI {voi_name}"


def display_pixels(
    path: Path, dataset: Dataset, stored: np.ndarray, photometric: str | None, voi_index: int
) -> tuple[np.ndarray, str]:
    """Stored values [H, W] -> display float32 [H, W]: Modality LUT -> VOI -> MONOCHROME1.

    Integer images (at most 2**16 + 1 distinct levels between their extremes)
    run the pipeline once per level on a lookup table and then index it, which
    gives the same values as running it per pixel at a fraction of the cost.
    """
    use_table = np.issubdtype(stored.dtype, np.integer) and stored.size > 0
    stored_range = (0.0, 0.0)
    if stored.size:
        stored_range = (float(stored.min()), float(stored.max()))
    if use_table:
        low, high = int(stored_range[0]), int(stored_range[1])
        use_table = high - low <= 2**16
    if use_table:
        if low == 0:
            offsets = stored
        elif np.issubdtype(stored.dtype, np.unsignedinteger):
            offsets = stored - stored.dtype.type(low)  # every value >= low: no wrap-around
        else:
            offsets = stored.astype(np.int32) - np.int32(low)
        inputs = np.arange(low, high + 1, dtype=np.float64)
        present: np.ndarray | None = np.bincount(offsets.ravel(), minlength=inputs.size) > 0
    else:
        inputs, present = stored, None
    values = _modality_values(path, dataset, inputs, stored_range)
    if dataset.get("ModalityLUTSequence"):
        modality = "its Modality LUT Sequence"
    else:
        slope, intercept = _rescale(path, dataset)
        modality = f"its rescale (Rescale Slope {slope:g}, Rescale Intercept {intercept:g})"
    _check_not_flat(
        path,
        stored_range,
        values,
        present,
        modality,
        0.0,
        "fix the file's rescale tags or Modality LUT, or re-export it.",
    )
    display, voi_name = _apply_voi(path, dataset, values, voi_index, present)
    choices = voi_options(dataset)
    if choices:
        others = (
            f"pick another VOI choice (0..{len(choices) - 1}) or fix the file's VOI tags."
            if len(choices) > 1
            else "fix the file's Window Center and Window Width (or VOI LUT) or re-export it."
        )
        _check_not_flat(path, stored_range, display, present, _voi_words(voi_name), _FLAT, others)
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
