"""What every DICOM object medvl writes shares: UIDs, equipment, the algorithm, the source
references, the path-leak guard and the atomic write.

- :func:`new_uid`: a fresh UID for each series and instance (never reused, never derived from
  the source's UIDs).
- :class:`Equipment`: manufacturer, model name, software version and device serial number
  (General / Enhanced General Equipment), naming the model that made the result.
- :func:`algorithm_identification` (TID 4019) and :func:`device_observer` (TID 1004): the model
  as the algorithm and the observing device; a demo model's notice rides in their text.
- :func:`source_reference`: the header of a source image, reduced to what the new objects
  reference (SOP class/instance, series, study), what their IODs require from the Patient and
  General Study modules (Type 1 and 2 attributes, empty where the source has none), and the
  image attributes the builders read (size, pixel spacing, grayscale pipeline). Nothing else of
  the source is copied into an output.
- :func:`leaked_paths`: every string value of a dataset that names a folder of this machine;
  :func:`write_dataset` refuses to write such a dataset and writes the others atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvl_engine import __version__
from medvl_engine.common.atomic import atomic_write
from medvl_engine.common.model_label import model_display_name
from medvl_engine.demo_models import demo_notice_for
from medvl_engine.errors import ExportError, MissingDependencyError

if TYPE_CHECKING:
    from pydicom.dataset import Dataset

__all__ = [
    "MANUFACTURER",
    "PRIVATE_SCHEME",
    "Equipment",
    "algorithm_identification",
    "device_observer",
    "leaked_paths",
    "new_uid",
    "private_code",
    "require_dicom",
    "require_highdicom",
    "series_laterality",
    "source_reference",
    "write_dataset",
]

MANUFACTURER = "medvl"
"""Manufacturer of every object medvl writes (the software, not the scanner)."""

PRIVATE_SCHEME = "99MEDVL"
"""Coding scheme designator of medvl's own codes (a private "99" scheme, PS3.16 8.1)."""

_REQUIRED_PATIENT_STUDY = (
    "PatientName",
    "PatientID",
    "PatientBirthDate",
    "PatientSex",
    "StudyDate",
    "StudyTime",
    "ReferringPhysicianName",
    "StudyID",
    "AccessionNumber",
)
"""Type 2 attributes of the Patient and General Study modules: present in every output, with
the source's value or empty. StudyInstanceUID (Type 1) is copied as well."""

_IMAGE_KEYWORDS = (
    "SpecificCharacterSet",
    "Modality",
    "Rows",
    "Columns",
    "NumberOfFrames",
    "SamplesPerPixel",
    "PhotometricInterpretation",
    "BitsAllocated",
    "BitsStored",
    "HighBit",
    "PixelRepresentation",
    "PixelSpacing",
    "ImagerPixelSpacing",
    "PatientOrientation",
    "RescaleSlope",
    "RescaleIntercept",
    "RescaleType",
    "ModalityLUTSequence",
    "WindowCenter",
    "WindowWidth",
    "WindowCenterWidthExplanation",
    "VOILUTFunction",
    "VOILUTSequence",
    "PresentationLUTShape",
    "ImageLaterality",
    "Laterality",
    "ViewPosition",
)
"""Source attributes the builders read (geometry, grayscale pipeline, laterality); the Patient
and Study ones above are the only identifying attributes that reach an output."""


def require_highdicom() -> None:
    """Raise MissingDependencyError (one sentence) unless highdicom can be imported."""
    try:
        import highdicom  # noqa: F401
    except ImportError as error:
        raise MissingDependencyError(
            "DICOM outputs need highdicom: pip install 'napari-medvl[dicom]'."
        ) from error


def new_uid() -> str:
    """A new UID (highdicom's root, random suffix) for one series or instance."""
    import highdicom

    return str(highdicom.UID())


def private_code(value: str, meaning: str) -> Any:
    """A code of medvl's private scheme :data:`PRIVATE_SCHEME` (value <= 16 chars, meaning
    <= 64 chars, as SH and LO allow)."""
    from highdicom.sr import CodedConcept

    return CodedConcept(value=value[:16], scheme_designator=PRIVATE_SCHEME, meaning=meaning[:64])


@dataclass(frozen=True)
class Equipment:
    """General and Enhanced General Equipment of an output: the software and the model.

    model_name: the model's display name (a registry name, or a folder's last component; never
    a path); notice: the demo notice for a demo model, else "".
    """

    model_name: str
    notice: str

    @classmethod
    def for_model(cls, model: str | os.PathLike[str] | None) -> Equipment:
        """The equipment naming ``model`` (registry name or folder), with its demo notice."""
        text = None if model is None else str(model)
        return cls(model_display_name(text), demo_notice_for(text) or "")

    @property
    def software_versions(self) -> str:
        return f"medvl {__version__}"

    @property
    def device_serial_number(self) -> str:
        """Type 1 in Enhanced General Equipment; software has no serial, so its version."""
        return f"medvl-{__version__}"

    @property
    def manufacturer_model_name(self) -> str:
        return self.model_name[:64]

    def label(self) -> str:
        """``MODEL`` or ``MODEL: notice`` (free text such as annotations)."""
        return f"{self.model_name}: {self.notice}" if self.notice else self.model_name

    def description(self, what: str) -> str:
        """A description of at most 64 chars (LO): the notice for a demo model, else ``what``."""
        return (self.notice or what)[:64]

    def keywords(self) -> dict[str, Any]:
        """Keyword arguments every highdicom image/PR constructor takes for the equipment."""
        return {
            "manufacturer": MANUFACTURER,
            "manufacturer_model_name": self.manufacturer_model_name,
            "software_versions": self.software_versions,
            "device_serial_number": self.device_serial_number,
        }


def algorithm_identification(equipment: Equipment, parameters: Iterable[str] = ()) -> Any:
    """TID 4019 Algorithm Identification: the model's name, medvl's version and
    ``parameters`` (plus the demo notice for a demo model)."""
    from highdicom.sr import AlgorithmIdentification

    texts = [str(p) for p in parameters]
    if equipment.notice:
        texts.append(equipment.notice)
    return AlgorithmIdentification(
        name=equipment.model_name,
        version=equipment.software_versions,
        parameters=texts or None,
        manufacturer=MANUFACTURER,
    )


def device_observer(equipment: Equipment, what: str) -> Any:
    """TID 1004 Device Observer context: medvl running ``what`` with the model (automatic:
    no person observed). The device UID is derived from the model and medvl's version, so
    reports of the same model share it."""
    from highdicom.sr import DeviceObserverIdentifyingAttributes, ObserverContext
    from pydicom.sr.codedict import codes
    from pydicom.uid import generate_uid

    uid = generate_uid(entropy_srcs=["medvl-device", equipment.model_name, __version__])
    name = f"medvl {what} ({equipment.label()})"
    return ObserverContext(
        observer_type=codes.DCM.Device,
        observer_identifying_attributes=DeviceObserverIdentifyingAttributes(
            uid=str(uid),
            name=name,
            manufacturer_name=MANUFACTURER,
            model_name=equipment.model_name,
        ),
    )


def require_dicom(paths: dict[str, Path | None]) -> None:
    """Raise ExportError unless every view came from a DICOM file (``{view: path}``)."""
    for view, path in paths.items():
        if path is None or not _is_dicom_file(Path(path)):
            name = Path(path).name if path is not None else f"the {view} view"
            raise ExportError(
                f"{name} is not a DICOM file, and DICOM outputs need DICOM sources; open the "
                "DICOM views or export GeoJSON/CSV instead.",
                path,
            )


def _is_dicom_file(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(132)
    except OSError:
        return False
    return len(head) == 132 and head[128:] == b"DICM"


def source_reference(path: Path) -> Dataset:
    """The header of DICOM image ``path`` reduced to what an output may carry (see module doc).

    Raises ExportError when the file cannot be read again or lacks the UIDs to reference it.
    """
    import pydicom
    from pydicom.dataset import Dataset

    path = Path(path)
    try:
        source = pydicom.dcmread(path, stop_before_pixels=True)
    except Exception as error:
        raise ExportError(
            f"{path.name}: could not be read again to reference it ({type(error).__name__}); "
            "check that the file is still there.",
            path,
        ) from error
    reference = Dataset()
    for keyword in ("SOPClassUID", "SOPInstanceUID", "StudyInstanceUID", "SeriesInstanceUID"):
        value = source.get(keyword)
        if not value:
            raise ExportError(
                f"{path.name}: its header has no {keyword}, so no DICOM object can reference "
                "it; re-export it from the archive.",
                path,
            )
        setattr(reference, keyword, value)
    for keyword in _REQUIRED_PATIENT_STUDY:
        setattr(reference, keyword, source.get(keyword, "") or "")
    for keyword in _IMAGE_KEYWORDS:
        if keyword in source:
            reference[keyword] = source[keyword]
    _check_single_grey_frame(path, reference)
    return reference


def _check_single_grey_frame(path: Path, reference: Dataset) -> None:
    """Refuse what the builders cannot reference faithfully: colour or multi-frame images."""
    samples = int(reference.get("SamplesPerPixel") or 1)
    frames = int(reference.get("NumberOfFrames") or 1)
    if samples != 1:
        raise ExportError(
            f"{path.name} is a colour image ({samples} samples per pixel), and the DICOM "
            "outputs annotate grayscale views only; export GeoJSON/CSV instead.",
            path,
        )
    if frames != 1:
        raise ExportError(
            f"{path.name} holds {frames} frames, and the DICOM outputs annotate single-frame "
            "views only; export GeoJSON/CSV instead.",
            path,
        )


def series_laterality(target: Dataset, reference: Dataset) -> Dataset:
    """Set ``target``'s General Series Laterality (Type 2C: required for a paired organ when
    the object states no Image Laterality) from the source's Image Laterality or Laterality;
    return ``target``."""
    side = str(reference.get("ImageLaterality") or reference.get("Laterality") or "")
    side = side.strip().upper()
    target.Laterality = side if side in ("L", "R") else None
    return target


def _string_values(dataset: Dataset) -> Iterator[str]:
    """Every text value of ``dataset`` and its sequences (PN, UI and bytes included)."""
    for element in dataset.iterall():
        if element.VR in ("SQ", "OB", "OW", "OF", "OD", "OL", "OV", "UN"):
            continue
        values = element.value if element.VM > 1 else [element.value]
        for value in values:
            if isinstance(value, bytes):
                yield value.decode("latin-1")
            elif value is not None and not isinstance(value, (int, float)):
                yield str(value)


def leaked_paths(dataset: Dataset, extra: Iterable[str | os.PathLike[str]] = ()) -> list[str]:
    """The text values of ``dataset`` that name a folder of this machine: ``/tmp``, ``/work``,
    the home and working folders, or any of ``extra`` (the source files' folders)."""
    needles = {"/tmp", "/work", os.getcwd(), str(Path.home())}
    needles.update(str(Path(p)) for p in extra)
    needles = {n for n in needles if n and n != "/"}
    return [text for text in _string_values(dataset) if any(n in text for n in needles)]


def write_dataset(
    dataset: Dataset, path: Path, sources: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """Write ``dataset`` to ``path`` atomically (DICOM file format, with its meta header).

    Raises ExportError, before writing, when a text value names a folder of this machine (see
    :func:`leaked_paths`; ``sources`` adds the source files' folders).
    """
    leaks = leaked_paths(dataset, [Path(s).parent for s in sources])
    if leaks:
        raise ExportError(
            f"{path.name} was not written: one of its values names a folder of this machine "
            f"({leaks[0][:60]!r}); this is a bug, please report it.",
            path,
        )
    return atomic_write(
        path,
        lambda temporary: dataset.save_as(temporary, enforce_file_format=True),
        what="DICOM object",
    )
