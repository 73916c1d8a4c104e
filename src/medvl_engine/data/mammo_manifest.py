"""Breast-level mammography manifests (CSV or JSONL) for TopKSigLIP.

One row per breast of one exam. Columns / keys:

* ``exam_id`` (str), ``laterality`` ("L" or "R"), ``cc_path``, ``mlo_path`` (DICOM or PNG;
  relative paths are read from the manifest's folder), ``split`` ("train", "val", "test").
* ``birads`` (1-5), ``density`` ("A"-"D"), ``cancer`` (0/1, true/false), ``findings`` (JSON
  list or ``;``-separated names: mass, calcification, architectural distortion, asymmetry).
  Each may be missing (an empty cell, ``NA``, ``N/A``, ``NaN``, ``None``, ``null``; RSNA has no
  density or findings, VinDr no cancer): the record holds None, and the Sup-sigmoid target and
  the metrics leave that field out. For ``findings`` an empty cell (or ``[]``) means "no
  finding"; write ``NA`` for unknown findings.
  Rows with BI-RADS 0 (incomplete) or 6 (known cancer) are skipped, as the paper excludes them,
  and counted (:class:`ManifestContents`).
* ``report`` (optional): the parsed report; when empty it is built from the labels the row has
  (:func:`medvl_engine.data.mammo_reports.parsed_report` when all are present).
* ``roi_boxes`` (optional): JSON ``{"CC": [[x0, y0, x1, y1], ...], "MLO": [...]}`` in each
  view's own source pixels, (x, y) with the origin at the top-left.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from medvl_engine.common.atomic import atomic_write_stream
from medvl_engine.data.mammo_reports import (
    BIRADS_SENTENCES,
    CANCER_SENTENCES,
    DENSITY_LABELS,
    DENSITY_SENTENCES,
    FINDING_SENTENCES,
    NEGATIVE_FINDINGS,
    normalise_findings,
    parsed_report,
)
from medvl_engine.errors import DataError

__all__ = [
    "MANIFEST_COLUMNS",
    "ManifestContents",
    "MammoRecord",
    "read_mammo_manifest",
    "read_mammo_manifest_contents",
    "write_mammo_manifest",
]

MANIFEST_COLUMNS = (
    "exam_id",
    "laterality",
    "cc_path",
    "mlo_path",
    "report",
    "birads",
    "density",
    "cancer",
    "findings",
    "roi_boxes",
    "split",
)
_REQUIRED = ("exam_id", "laterality", "cc_path", "mlo_path")
_MISSING = ("", "na", "n/a", "nan", "none", "null")
_EXCLUDED_BIRADS = (0, 6)


@dataclass
class MammoRecord:
    """One breast: two view files, labels, parsed report and ROI boxes in source px."""

    exam_id: str
    laterality: str
    cc_path: Path
    mlo_path: Path
    birads: int | None
    density: str | None
    cancer: bool | None
    findings: list[str] | None
    report: str
    roi_boxes: dict[str, list[list[float]]] = field(default_factory=dict)
    split: str = "train"

    @property
    def has_roi(self) -> bool:
        return any(len(boxes) for boxes in self.roi_boxes.values())


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and value != value:
        return True
    return isinstance(value, str) and value.strip().lower() in _MISSING


def _parse_bool(value: Any) -> bool | None:
    if _is_missing(value):
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "1.0", "true", "yes", "y", "positive"):
        return True
    if text in ("0", "0.0", "false", "no", "n", "negative"):
        return False
    raise ValueError(f"cancer must be 0/1 or true/false, got {value!r}")


def _parse_findings(value: Any) -> list[str] | None:
    if isinstance(value, str) and value.strip() == "":
        return []  # an empty findings cell has always meant "no finding"
    if _is_missing(value):
        return None
    if isinstance(value, str):
        text = value.strip()
        items = (
            json.loads(text) if text.startswith("[") else [v for v in text.split(";") if v.strip()]
        )
    else:
        items = list(value)
    return normalise_findings(items)


def _parse_boxes(value: Any) -> dict[str, list[list[float]]]:
    if value is None or value == "":
        return {}
    boxes = json.loads(value) if isinstance(value, str) else dict(value)
    out: dict[str, list[list[float]]] = {}
    for view, items in boxes.items():
        if view not in ("CC", "MLO"):
            raise ValueError(f"roi_boxes views must be CC or MLO, got {view!r}")
        rows = [[float(v) for v in box] for box in items]
        if any(len(r) != 4 or r[2] <= r[0] or r[3] <= r[1] for r in rows):
            raise ValueError(f"roi_boxes {view} must be [x0, y0, x1, y1] with x1 > x0, y1 > y0")
        out[view] = rows
    return out


def _parse_birads(value: Any) -> int | None:
    if _is_missing(value):
        return None
    number = float(value)
    if number != int(number):
        raise ValueError(f"birads must be a whole number 1..5, got {value!r}")
    return int(number)


def _report_of_labels(
    findings: list[str] | None, density: str | None, birads: int | None, cancer: bool | None
) -> str:
    """The parsed report of the labels present (all four: :func:`parsed_report`)."""
    if findings is not None and density is not None and birads is not None and cancer is not None:
        return parsed_report(findings, density, birads, cancer)
    parts = []
    if findings is not None:
        parts.extend([FINDING_SENTENCES[kind] for kind in findings] or [NEGATIVE_FINDINGS])
    if density is not None:
        parts.append(DENSITY_SENTENCES[density])
    if birads is not None:
        parts.append(f"BIRADS {birads}: {BIRADS_SENTENCES[birads]}")
    if cancer is not None:
        parts.append(CANCER_SENTENCES[cancer])
    return " ".join(parts)


def _record(row: dict[str, Any], root: Path) -> MammoRecord:
    missing = [name for name in _REQUIRED if _is_missing(row.get(name))]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    laterality = str(row["laterality"]).strip().upper()[:1]
    if laterality not in ("L", "R"):
        raise ValueError(f"laterality must be L or R, got {row['laterality']!r}")
    birads = _parse_birads(row.get("birads"))
    if birads is not None and not 1 <= birads <= 5:
        raise ValueError(f"birads must be 0..6 (0 and 6 are skipped), got {birads}")
    density = None if _is_missing(row.get("density")) else str(row["density"]).strip().upper()
    if density is not None and density not in DENSITY_LABELS:
        raise ValueError(f"density must be one of A-D, got {row['density']!r}")
    cancer = _parse_bool(row.get("cancer"))
    findings = _parse_findings(row.get("findings"))
    given = "" if _is_missing(row.get("report")) else str(row["report"]).strip()
    report = given or _report_of_labels(findings, density, birads, cancer)
    if not report:
        raise ValueError("no report and no label to build one from")

    def resolve(path: Any) -> Path:
        candidate = Path(str(path))
        return candidate if candidate.is_absolute() else root / candidate

    return MammoRecord(
        exam_id=str(row["exam_id"]),
        laterality=laterality,
        cc_path=resolve(row["cc_path"]),
        mlo_path=resolve(row["mlo_path"]),
        birads=birads,
        density=density,
        cancer=cancer,
        findings=findings,
        report=report,
        roi_boxes=_parse_boxes(row.get("roi_boxes")),
        split=str(row.get("split") or "train").strip().lower(),
    )


@dataclass
class ManifestContents:
    """Records of a manifest and the number of rows skipped for BI-RADS 0 or 6 (of that split)."""

    records: list[MammoRecord]
    skipped_birads_0_6: int


def read_mammo_manifest(path: str | Path, split: str | None = None) -> list[MammoRecord]:
    """Records of a CSV or JSONL manifest, optionally only one split (BI-RADS 0 / 6 rows skipped).

    Raises :class:`DataError` naming the file, the row and the problem.
    """
    return read_mammo_manifest_contents(path, split).records


def read_mammo_manifest_contents(path: str | Path, split: str | None = None) -> ManifestContents:
    """Records of a manifest (optionally one split) and the count of BI-RADS 0 / 6 rows skipped.

    Raises :class:`DataError` naming the file, the row and the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"manifest {path} does not exist; pass a CSV or JSONL manifest.", path)
    try:
        if path.suffix.lower() in (".jsonl", ".json"):
            lines = path.read_text(encoding="utf-8").splitlines()
            rows = [json.loads(line) for line in lines if line.strip()]
        else:
            with path.open(newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
    except (json.JSONDecodeError, UnicodeDecodeError, csv.Error) as error:
        raise DataError(
            f"manifest {path} cannot be parsed ({error}); fix the file.", path
        ) from None
    records = []
    skipped = 0
    for number, row in enumerate(rows, start=1):
        try:
            birads = _parse_birads(row.get("birads"))
            if birads in _EXCLUDED_BIRADS:
                row_split = "train" if _is_missing(row.get("split")) else str(row["split"])
                skipped += split is None or row_split.strip().lower() == split
                continue
            records.append(_record(row, path.parent))
        except (ValueError, TypeError, json.JSONDecodeError) as error:
            raise DataError(
                f"manifest {path} row {number}: {error}; fix that row (columns are "
                f"{', '.join(MANIFEST_COLUMNS)}).",
                path,
            ) from None
    if split is not None:
        records = [r for r in records if r.split == split]
    return ManifestContents(records, int(skipped))


def write_mammo_manifest(records: list[MammoRecord], path: str | Path) -> Path:
    """Write records as CSV (paths relative to the manifest's folder when possible), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def rel(p: Path) -> str:
        try:
            return str(Path(p).resolve().relative_to(path.parent.resolve()))
        except ValueError:
            return str(p)

    def write(handle: IO[str]) -> None:
        writer = csv.DictWriter(handle, fieldnames=list(MANIFEST_COLUMNS))
        writer.writeheader()
        for r in records:
            writer.writerow(
                {
                    "exam_id": r.exam_id,
                    "laterality": r.laterality,
                    "cc_path": rel(r.cc_path),
                    "mlo_path": rel(r.mlo_path),
                    "report": r.report,
                    "birads": "" if r.birads is None else r.birads,
                    "density": r.density or "",
                    "cancer": "" if r.cancer is None else int(r.cancer),
                    "findings": "" if r.findings is None else json.dumps(r.findings),
                    "roi_boxes": json.dumps(r.roi_boxes),
                    "split": r.split,
                }
            )

    atomic_write_stream(path, write, what="manifest")
    return path
