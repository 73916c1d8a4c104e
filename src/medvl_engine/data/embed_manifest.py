"""Breast-level TopKSigLIP manifests built from EMBED's own tables.

Reads ``EMBED_OpenData_metadata.csv`` (one row per image) and ``EMBED_OpenData_clinical.csv``
(one row per finding of an exam) with the column names EMBED publishes, and writes the
breast-level manifest that :func:`medvl_engine.data.mammo_manifest.read_mammo_manifest` reads:

* **Images**: 2D full-field images (``FinalImageType`` 2D, ``spot_mag`` empty or 0) with a CC or
  MLO ``ViewPosition``, grouped by ``acc_anon`` and ``ImageLateralityFinal``; a breast needs one
  CC-like and one MLO-like view. A missing standard view is replaced by another view of the
  same side (:data:`VIEW_SUBSTITUTES`), as the paper does.
* **Labels**: per accession and ``side`` (rows with side ``B`` or no side apply to both
  breasts): ``asses`` N/B/P/S/M -> BI-RADS 1..5, the most severe row wins; a breast with an
  ``A`` (BI-RADS 0) or ``K`` (6) row is dropped and counted. ``tissueden`` 1..4 -> A..D (other
  values: missing). Cancer is 1 when a row has ``path_severity`` 0 or 1, else 0. Findings: a
  mass when ``massshape`` / ``massmargin`` is set, calcification when ``calcfind`` /
  ``calcdistri`` is set; architectural distortion and asymmetry come from the ``massshape``
  finding-type codes (:data:`DISTORTION_CODES`, :data:`ASYMMETRY_CODES`; check them against
  the EMBED data dictionary of your release).
* **ROIs**: ``ROI_coords`` lists boxes in source pixels as ``(y0, x0, y1, x1)`` (EMBED's
  order; ``roi_order="xyxy"`` when an image shows otherwise); they become ``[x0, y0, x1, y1]``.
* **Splits** by ``cohort_num`` (:data:`DEFAULT_SPLITS`: the paper's train 1-2, val 8, test
  9-10); breasts of other cohorts are dropped and counted.

Missing labels become empty cells; the ``report`` column is left empty so that the reader
builds it from the labels.
"""

from __future__ import annotations

import ast
import csv
import json
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from medvl_engine.common.atomic import atomic_write_stream
from medvl_engine.data.mammo_manifest import MANIFEST_COLUMNS
from medvl_engine.errors import DataError

__all__ = [
    "ASYMMETRY_CODES",
    "CLINICAL_COLUMNS",
    "DEFAULT_SPLITS",
    "DISTORTION_CODES",
    "METADATA_COLUMNS",
    "VIEW_SUBSTITUTES",
    "build_embed_manifest",
]

METADATA_COLUMNS = (
    "acc_anon",
    "empi_anon",
    "anon_dicom_path",
    "ImageLateralityFinal",
    "ViewPosition",
    "FinalImageType",
    "spot_mag",
    "ROI_coords",
    "cohort_num",
)
CLINICAL_COLUMNS = (
    "acc_anon",
    "side",
    "asses",
    "tissueden",
    "path_severity",
    "massshape",
    "massmargin",
    "calcfind",
    "calcdistri",
)
DEFAULT_SPLITS: dict[str, tuple[int, ...]] = {"train": (1, 2), "val": (8,), "test": (9, 10)}
VIEW_SUBSTITUTES: dict[str, tuple[str, ...]] = {
    "CC": ("CC", "XCCL", "XCCM"),
    "MLO": ("MLO", "ML", "LM", "LMO"),
}
"""View positions accepted for each view of a breast, the standard one first."""
DISTORTION_CODES = frozenset({"Q"})
"""``massshape`` codes of an architectural distortion."""
ASYMMETRY_CODES = frozenset({"A", "B", "F", "V"})
"""``massshape`` codes of an asymmetry (asymmetry, focal, global, developing)."""

_BIRADS_OF_ASSES = {"N": 1, "B": 2, "P": 3, "S": 4, "M": 5}
_DROPPED_ASSES = {"A": "dropped_birads_0", "K": "dropped_birads_6"}
_DENSITY_OF_TISSUEDEN = {1: "A", 2: "B", 3: "C", 4: "D"}
_MISSING = ("", "na", "n/a", "nan", "none", "null")


@dataclass
class _Breast:
    """Labels gathered for one breast of one accession from the clinical rows."""

    birads: int | None = None
    dropped: str | None = None
    density: str | None = None
    cancer: bool = False
    findings: set[str] = field(default_factory=set)


def _missing(value: str | None) -> bool:
    return value is None or value.strip().lower() in _MISSING


def _number(value: str | None) -> float | None:
    if _missing(value):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except ValueError:
        return None


def _rows(path: Path, required: Sequence[str], table: str) -> Iterator[dict[str, str]]:
    """Rows of an EMBED CSV table, after checking that its header has every required column."""
    if not path.is_file():
        raise DataError(f"EMBED {table} table {path} does not exist; pass the CSV file.", path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            absent = [name for name in required if name not in header]
            if absent:
                raise DataError(
                    f"EMBED {table} table {path} has no column {', '.join(absent)}; pass the "
                    f"table as EMBED publishes it (columns {', '.join(required)}).",
                    path,
                )
            yield from reader
    except (UnicodeDecodeError, csv.Error) as error:
        raise DataError(
            f"EMBED {table} table {path} cannot be read ({error}); fix it.", path
        ) from None


def _roi_boxes(text: str, order: str, path: Path, accession: str) -> list[list[float]]:
    """``ROI_coords`` as ``[x0, y0, x1, y1]`` boxes (degenerate boxes left out)."""
    if _missing(text):
        return []
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise DataError(
            f"EMBED metadata table {path}: ROI_coords {text!r} of accession {accession} is not "
            "a list of (y0, x0, y1, x1) boxes; fix or empty that cell.",
            path,
        ) from None
    items = list(value) if isinstance(value, list | tuple) else []
    if len(items) == 4 and all(isinstance(v, int | float) for v in items):
        items = [items]
    boxes = []
    for item in items:
        if not isinstance(item, list | tuple) or len(item) != 4:
            continue
        a, b, c, d = (float(v) for v in item)
        x0, y0, x1, y1 = (b, a, d, c) if order == "yxyx" else (a, b, c, d)
        if x1 > x0 and y1 > y0:
            boxes.append([x0, y0, x1, y1])
    return boxes


def _image_path(text: str, image_root: Path, dicom_prefix: str) -> Path:
    """Where an ``anon_dicom_path`` lies under ``image_root``."""
    value = text.strip()
    if dicom_prefix and value.startswith(dicom_prefix):
        return image_root / value[len(dicom_prefix) :].lstrip("/")
    candidate = Path(value)
    return candidate if candidate.is_absolute() else image_root / candidate


def _clinical_breasts(path: Path) -> dict[tuple[str, str], _Breast]:
    breasts: dict[tuple[str, str], _Breast] = defaultdict(_Breast)
    for row in _rows(path, CLINICAL_COLUMNS, "clinical"):
        accession = row["acc_anon"].strip()
        side = (row["side"] or "").strip().upper()
        sides = (side,) if side in ("L", "R") else ("L", "R")
        asses = (row["asses"] or "").strip().upper()
        tissueden = _number(row["tissueden"])
        severity = _number(row["path_severity"])
        shape = (row["massshape"] or "").strip().upper()
        findings = set()
        if shape in DISTORTION_CODES:
            findings.add("architectural distortion")
        elif shape in ASYMMETRY_CODES:
            findings.add("asymmetry")
        elif shape or not _missing(row["massmargin"]):
            findings.add("mass")
        if not _missing(row["calcfind"]) or not _missing(row["calcdistri"]):
            findings.add("calcification")
        for lateral in sides:
            breast = breasts[(accession, lateral)]
            if asses in _DROPPED_ASSES:
                breast.dropped = breast.dropped or _DROPPED_ASSES[asses]
            elif asses in _BIRADS_OF_ASSES:
                breast.birads = max(breast.birads or 0, _BIRADS_OF_ASSES[asses])
            if breast.density is None and tissueden is not None:
                breast.density = _DENSITY_OF_TISSUEDEN.get(int(tissueden))
            breast.cancer |= severity in (0.0, 1.0)
            breast.findings |= findings
    return breasts


def _split_of(cohort: float | None, splits: Mapping[str, Sequence[int]]) -> str | None:
    for name, cohorts in splits.items():
        if cohort is not None and int(cohort) in {int(c) for c in cohorts}:
            return name
    return None


def _view_kind(position: str) -> str | None:
    for kind, accepted in VIEW_SUBSTITUTES.items():
        if position in accepted:
            return kind
    return None


def build_embed_manifest(
    metadata_csv: str | Path,
    clinical_csv: str | Path,
    image_root: str | Path,
    out_path: str | Path,
    splits: Mapping[str, Sequence[int]] | None = None,
    *,
    roi_order: str = "yxyx",
    dicom_prefix: str = "/mnt/NAS2/mammo/anon_dicom/",
) -> dict[str, int]:
    """Write the breast-level manifest of EMBED's tables to ``out_path`` (CSV, atomically).

    ``splits`` maps split names to ``cohort_num`` values (default :data:`DEFAULT_SPLITS`).
    ``anon_dicom_path`` values starting with ``dicom_prefix`` (EMBED's original mount), or
    relative ones, are placed under ``image_root``. Returns the counts: ``images_read``,
    ``images_kept``, ``breasts_written``, ``breasts_<split>``, ``views_substituted``,
    ``breasts_without_pair``, ``breasts_without_clinical``, ``dropped_birads_0``,
    ``dropped_birads_6``, ``breasts_outside_splits``, ``breasts_with_roi``, ``roi_boxes``.
    Raises :class:`DataError` naming the table and the column or cell at fault.
    """
    if roi_order not in ("yxyx", "xyxy"):
        raise ValueError(f"roi_order must be 'yxyx' or 'xyxy', got {roi_order!r}")
    metadata_csv, clinical_csv, out_path = Path(metadata_csv), Path(clinical_csv), Path(out_path)
    image_root = Path(image_root).absolute()
    splits = dict(DEFAULT_SPLITS if splits is None else splits)
    counts: dict[str, int] = defaultdict(int)

    views: dict[tuple[str, str], dict[str, list[tuple[int, str, list[list[float]]]]]] = defaultdict(
        lambda: {"CC": [], "MLO": []}
    )
    cohort_of: dict[str, float | None] = {}
    for row in _rows(metadata_csv, METADATA_COLUMNS, "metadata"):
        counts["images_read"] += 1
        position = (row["ViewPosition"] or "").strip().upper()
        laterality = (row["ImageLateralityFinal"] or "").strip().upper()
        spot_mag = _number(row["spot_mag"])
        kind = _view_kind(position)
        if (
            (row["FinalImageType"] or "").strip().upper() != "2D"
            or (spot_mag is not None and spot_mag != 0)
            or kind is None
            or laterality not in ("L", "R")
            or _missing(row["anon_dicom_path"])
        ):
            continue
        counts["images_kept"] += 1
        accession = row["acc_anon"].strip()
        rank = VIEW_SUBSTITUTES[kind].index(position)
        boxes = _roi_boxes(row["ROI_coords"], roi_order, metadata_csv, accession)
        views[(accession, laterality)][kind].append((rank, row["anon_dicom_path"], boxes))
        cohort_of.setdefault(accession, _number(row["cohort_num"]))

    clinical = _clinical_breasts(clinical_csv)
    rows = []
    for (accession, laterality), found in sorted(views.items()):
        if not found["CC"] or not found["MLO"]:
            counts["breasts_without_pair"] += 1
            continue
        chosen = {kind: min(found[kind], key=lambda v: (v[0], v[1])) for kind in ("CC", "MLO")}
        counts["views_substituted"] += sum(v[0] > 0 for v in chosen.values())
        breast = clinical.get((accession, laterality))
        if breast is None:
            counts["breasts_without_clinical"] += 1
            continue
        if breast.dropped:
            counts[breast.dropped] += 1
            continue
        split = _split_of(cohort_of.get(accession), splits)
        if split is None:
            counts["breasts_outside_splits"] += 1
            continue
        roi = {kind: chosen[kind][2] for kind in ("CC", "MLO") if chosen[kind][2]}
        counts["breasts_with_roi"] += bool(roi)
        counts["roi_boxes"] += sum(len(b) for b in roi.values())
        counts[f"breasts_{split}"] += 1
        rows.append(
            {
                "exam_id": accession,
                "laterality": laterality,
                "cc_path": _relative(
                    _image_path(chosen["CC"][1], image_root, dicom_prefix), out_path
                ),
                "mlo_path": _relative(
                    _image_path(chosen["MLO"][1], image_root, dicom_prefix), out_path
                ),
                "report": "",
                "birads": "" if breast.birads is None else breast.birads,
                "density": breast.density or "",
                "cancer": int(breast.cancer),
                "findings": json.dumps(sorted(breast.findings)),
                "roi_boxes": json.dumps(roi) if roi else "",
                "split": split,
            }
        )
    counts["breasts_written"] = len(rows)

    def write(handle: IO[str]) -> None:
        writer = csv.DictWriter(handle, fieldnames=list(MANIFEST_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)

    atomic_write_stream(out_path, write, what="manifest")
    return dict(counts)


def _relative(path: Path, out_path: Path) -> str:
    """``path`` relative to the manifest's folder when it lies inside it, else absolute."""
    try:
        return str(path.relative_to(out_path.parent.absolute()))
    except ValueError:
        return str(path)
