"""Breast-level mammography manifests (CSV or JSONL) for TopKSigLIP.

One row per breast of one exam. Columns / keys:

* ``exam_id`` (str), ``laterality`` ("L" or "R"), ``cc_path``, ``mlo_path`` (DICOM or PNG;
  relative paths are read from the manifest's folder), ``split`` ("train", "val", "test").
* ``birads`` (1-5), ``density`` ("A"-"D"), ``cancer`` (0/1, true/false), ``findings`` (JSON
  list or ``;``-separated names: mass, calcification, architectural distortion, asymmetry).
* ``report`` (optional): the parsed report; when empty it is built from the labels
  (:func:`medvl_engine.data.mammo_reports.parsed_report`).
* ``roi_boxes`` (optional): JSON ``{"CC": [[x0, y0, x1, y1], ...], "MLO": [...]}`` in each
  view's own source pixels, (x, y) with the origin at the top-left.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from medvl_engine._atomic import atomic_write_stream
from medvl_engine.data.mammo_reports import DENSITY_LABELS, normalise_findings, parsed_report
from medvl_engine.errors import DataError

__all__ = ["MANIFEST_COLUMNS", "MammoRecord", "read_mammo_manifest", "write_mammo_manifest"]

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
_REQUIRED = ("exam_id", "laterality", "cc_path", "mlo_path", "birads", "density", "cancer")


@dataclass
class MammoRecord:
    """One breast: two view files, labels, parsed report and ROI boxes in source px."""

    exam_id: str
    laterality: str
    cc_path: Path
    mlo_path: Path
    birads: int
    density: str
    cancer: bool
    findings: list[str]
    report: str
    roi_boxes: dict[str, list[list[float]]] = field(default_factory=dict)
    split: str = "train"

    @property
    def has_roi(self) -> bool:
        return any(len(boxes) for boxes in self.roi_boxes.values())


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "y", "positive"):
        return True
    if text in ("0", "false", "no", "n", "negative", ""):
        return False
    raise ValueError(f"cancer must be 0/1 or true/false, got {value!r}")


def _parse_findings(value: Any) -> list[str]:
    if value is None or value == "":
        return []
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


def _record(row: dict[str, Any], root: Path) -> MammoRecord:
    missing = [name for name in _REQUIRED if row.get(name) in (None, "")]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    laterality = str(row["laterality"]).strip().upper()[:1]
    if laterality not in ("L", "R"):
        raise ValueError(f"laterality must be L or R, got {row['laterality']!r}")
    birads = int(row["birads"])
    if not 1 <= birads <= 5:
        raise ValueError(f"birads must be 1..5 (0 and 6 are excluded), got {birads}")
    density = str(row["density"]).strip().upper()
    if density not in DENSITY_LABELS:
        raise ValueError(f"density must be one of A-D, got {row['density']!r}")
    cancer = _parse_bool(row["cancer"])
    findings = _parse_findings(row.get("findings"))
    report = str(row.get("report") or "").strip() or parsed_report(
        findings, density, birads, cancer
    )

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


def read_mammo_manifest(path: str | Path, split: str | None = None) -> list[MammoRecord]:
    """Records of a CSV or JSONL manifest, optionally only one split.

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
    for number, row in enumerate(rows, start=1):
        try:
            records.append(_record(row, path.parent))
        except (ValueError, TypeError, json.JSONDecodeError) as error:
            raise DataError(
                f"manifest {path} row {number}: {error}; fix that row (columns are "
                f"{', '.join(MANIFEST_COLUMNS)}).",
                path,
            ) from None
    if split is not None:
        records = [r for r in records if r.split == split]
    return records


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
                    "birads": r.birads,
                    "density": r.density,
                    "cancer": int(r.cancer),
                    "findings": json.dumps(r.findings),
                    "roi_boxes": json.dumps(r.roi_boxes),
                    "split": r.split,
                }
            )

    atomic_write_stream(path, write, what="manifest")
    return path
