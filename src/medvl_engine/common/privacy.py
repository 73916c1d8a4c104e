"""Which file properties may be shown without ``--identifying``: known technical keys only.

Slide and mammogram readers keep every property they find (``properties``) apart from the
fields they know to name a patient (``private_properties``). What is shown by default is
decided here in two steps: a key is shown only if it is on the allow-list of technical keys
below (an unknown key stays hidden: a scanner may put anything in a free-text field), and
never if a word of its name says date, time, an identifier, a person, a place or a free
text (the deny-list guards the allow-list against a careless addition), nor when its value
holds a date or a time of day (a version string may carry a build date).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["holds_date_or_time", "is_shown_by_default", "split_identifying"]

_TECHNICAL_KEYS = frozenset(
    key.lower()
    for key in (
        # tiffslide, for every TIFF-based format
        "tiffslide.vendor",
        "tiffslide.objective-power",
        "tiffslide.mpp-x",
        "tiffslide.mpp-y",
        "tiffslide.series-index",
        "tiffslide.series-axes",
        "tiffslide.bounds-x",
        "tiffslide.bounds-y",
        "tiffslide.bounds-width",
        "tiffslide.bounds-height",
        # baseline TIFF tags
        "tiff.ResolutionUnit",
        "tiff.XResolution",
        "tiff.YResolution",
        "tiff.Software",
        "tiff.Make",
        "tiff.Model",
        # Aperio ImageDescription fields
        "aperio.AppMag",
        "aperio.MPP",
        "aperio.Filtered",
        "aperio.Focus Offset",
        "aperio.Left",
        "aperio.Top",
        "aperio.LineAreaXOffset",
        "aperio.LineAreaYOffset",
        "aperio.LineCameraSkew",
        "aperio.OriginalWidth",
        "aperio.OriginalHeight",
        "aperio.Originalheight",
        "aperio.Parmset",
        "aperio.StripeWidth",
        "aperio.Header",
        "aperio.Exposure Scale",
        "aperio.Gamma",
        # Hamamatsu NDPI tags
        "hamamatsu.SourceLens",
        "hamamatsu.XOffsetFromSlideCentre",
        "hamamatsu.YOffsetFromSlideCentre",
        "hamamatsu.ZOffsetFromSlideCentre",
        "hamamatsu.Model",
        # Leica SCN
        "leica.aperture",
        "leica.device-model",
        "leica.device-version",
        "leica.illumination-source",
        "leica.objective",
        # DICOM whole-slide images
        "dicom.TransferSyntaxUID",
        "dicom.DimensionOrganizationType",
        "dicom.Manufacturer",
        "dicom.ManufacturerModelName",
        "dicom.SoftwareVersions",
        # mammograms
        "transfer_syntax",
        "sop_class",
        "bits_stored",
        "manufacturer",
        "presentation_lut_shape",
    )
)
_TECHNICAL_PREFIXES = ("medvl.",)  # what the engine itself notes about a file

_IDENTIFYING_WORDS = frozenset(
    {
        "accession",
        "address",
        "barcode",
        "birth",
        "comment",
        "date",
        "datetime",
        "description",
        "filename",
        "id",
        "identifier",
        "institution",
        "label",
        "operator",
        "operators",
        "patient",
        "person",
        "physician",
        "physicians",
        "serial",
        "station",
        "study",
        "time",
        "uid",
        "user",
    }
)
# UIDs that name a standard (how the pixels are encoded, what kind of object), not an instance
_STANDARD_UID_KEYS = frozenset({"dicom.transfersyntaxuid", "transfer_syntax", "sop_class"})

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_DATE_OR_TIME = re.compile(
    r"\b\d{1,2}:\d{2}(:\d{2})?\b"  # 18:39 or 18:39:42
    r"|\b\d{4}-\d{1,2}-\d{1,2}\b"  # 2022-10-04
    r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"  # 12/29/09
    r"|\b(19|20)\d{2}(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])\b"  # DICOM DA 20221004
)


def _words(key: str) -> set[str]:
    """Lower-case words of a key: "aperio.ScanScope ID" -> {aperio, scan, scope, id}."""
    return {word.lower() for word in _WORD.findall(key)}


def is_shown_by_default(key: str) -> bool:
    """True when ``key`` is a known technical property whose name says nothing identifying."""
    lowered = key.lower()
    allowed = lowered in _TECHNICAL_KEYS or lowered.startswith(_TECHNICAL_PREFIXES)
    if not allowed:
        return False
    return lowered in _STANDARD_UID_KEYS or not (_words(key) & _IDENTIFYING_WORDS)


def holds_date_or_time(value: Any) -> bool:
    """True when the text of ``value`` contains a date or a time of day."""
    return _DATE_OR_TIME.search(str(value)) is not None


def split_identifying(properties: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(shown, withheld): a property is shown when :func:`is_shown_by_default` accepts its key
    and its value holds no date or time (:func:`holds_date_or_time`); order is kept."""
    shown: dict[str, Any] = {}
    withheld: dict[str, Any] = {}
    for key, value in properties.items():
        visible = is_shown_by_default(str(key)) and not holds_date_or_time(value)
        (shown if visible else withheld)[key] = value
    return shown, withheld
