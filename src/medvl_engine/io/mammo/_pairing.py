"""Is this a CC/MLO pair of one breast? The checks ``breast_image`` runs before it builds one.

A pair is refused, with one sentence, when what the files say contradicts it:

* the same file given for both views;
* different patients or studies: DICOM Patient ID (0010,0020) or Study Instance UID
  (0020,000D) present in both files and different (the identifiers themselves are never
  put in the sentence);
* different breasts: laterality (DICOM Image Laterality, else the file name) known for both
  and different;
* not two different views: both views the same, or the CC slot given an MLO-family view and
  the MLO slot a CC-family view (swapped).

What a file does not say is not held against it: PNG views carry no patient or study, and a
view or laterality missing from both header and file name is left to the caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from medvl_engine.errors import MedVLError

if TYPE_CHECKING:
    from medvl_engine.io.mammo._mammogram import Mammogram

__all__ = ["PairMismatchError", "check_pair", "view_family"]

CC_FAMILY = frozenset({"CC", "XCCL", "XCCM", "FB"})
MLO_FAMILY = frozenset({"MLO", "ML", "LM", "LMO", "SIO"})

_IDENTITY_TAGS = (
    ("PatientID", "patients", "Patient IDs"),
    ("StudyInstanceUID", "studies", "Study Instance UIDs"),
)


class PairMismatchError(MedVLError):
    """Two views that cannot be one breast's CC/MLO pair."""


def view_family(view: str | None) -> str | None:
    """'CC' for cranio-caudal views (CC, XCCL, XCCM, FB), 'MLO' for lateral ones, else None."""
    if view is None:
        return None
    key = view.upper()
    if key in CC_FAMILY:
        return "CC"
    if key in MLO_FAMILY:
        return "MLO"
    return None


def _name(mammogram: Mammogram) -> str:
    return Path(str(mammogram.path)).name


def _same_file(a: Mammogram, b: Mammogram) -> bool:
    try:
        return Path(str(a.path)).resolve() == Path(str(b.path)).resolve()
    except OSError:
        return str(a.path) == str(b.path)


def check_pair(cc: Mammogram, mlo: Mammogram) -> None:
    """Raise PairMismatchError when ``cc`` and ``mlo`` cannot be the CC/MLO views of one breast."""
    cc_name, mlo_name = _name(cc), _name(mlo)
    if cc is mlo or _same_file(cc, mlo):
        raise PairMismatchError(
            f"{cc_name} was given as both the CC and the MLO view; choose two different views "
            "of one breast."
        )
    for keyword, what, tags in _IDENTITY_TAGS:
        a = str(cc.private_properties.get(keyword) or "").strip()
        b = str(mlo.private_properties.get(keyword) or "").strip()
        if a and b and a != b:
            raise PairMismatchError(
                f"{cc_name} and {mlo_name} are from different {what} (their DICOM {tags} "
                "differ); pair the CC and MLO views of one breast from one examination."
            )
    if cc.laterality and mlo.laterality and cc.laterality != mlo.laterality:
        raise PairMismatchError(
            f"{cc_name} ({cc.laterality}) and {mlo_name} ({mlo.laterality}) are different "
            "breasts; pair the CC and MLO views of the same side."
        )
    cc_family, mlo_family = view_family(cc.view), view_family(mlo.view)
    same_view = bool(cc.view and mlo.view and cc.view.upper() == mlo.view.upper())
    if same_view or (cc_family is not None and cc_family == mlo_family):
        raise PairMismatchError(
            f"{cc_name} ({cc.view}) and {mlo_name} ({mlo.view}) are the same kind of view; pair "
            "a CC view with an MLO view of the same breast."
        )
    if cc_family == "MLO" and mlo_family == "CC":
        raise PairMismatchError(
            f"{cc_name} is the {cc.view} view and {mlo_name} the {mlo.view} view: the CC and "
            "MLO views are swapped; give the CC view first."
        )
    for given, slot, family in ((cc, "CC", cc_family), (mlo, "MLO", mlo_family)):
        if family is not None and family != slot:
            raise PairMismatchError(
                f"{_name(given)} is a {given.view} view but was given as the {slot} view; "
                f"choose the {slot} view of the breast there."
            )
