"""Slide manifests: one row per slide with its organ, report, feature store and split.

CSV (header row) or JSONL (one object per line). Columns:

    slide_id   unique id
    organ      organ / tissue site (the sampler draws negatives within it)
    report     report text, or report_path: a text file (relative paths: from the manifest)
    features   a zarr feature store group ("features" [N, D], "coords" [N, 2]) or a
               TRIDENT/CLAM .h5 file (relative paths: from the manifest's folder)
    split      train | val | test
    label      optional class name for zero-shot evaluation (e.g. an OncoTree subtype)
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

from medvl_engine.errors import DataError

__all__ = ["SlideRecord", "read_manifest", "REQUIRED_COLUMNS", "SPLITS"]

REQUIRED_COLUMNS = ("slide_id", "organ", "features", "split")
SPLITS = ("train", "val", "test")


@dataclasses.dataclass(frozen=True)
class SlideRecord:
    """One slide: ids, organ, report text, feature file, split and optional label."""

    slide_id: str
    organ: str
    report: str
    features: Path
    split: str
    label: str | None = None


def _rows(path: Path) -> list[dict[str, str]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise DataError(
                    f"manifest {path} line {number} is not valid JSON; fix or remove that line.",
                    path,
                ) from None
            if not isinstance(row, dict):
                raise DataError(f"manifest {path} line {number} must be a JSON object.", path)
            rows.append({k: "" if v is None else str(v) for k, v in row.items()})
        return rows
    if path.suffix.lower() in (".csv", ".tsv"):
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
        return [dict(row) for row in reader]
    raise DataError(
        f"manifest {path} must be .csv, .tsv or .jsonl; convert it to one of them.", path
    )


def read_manifest(path: str | Path, check_files: bool = True) -> list[SlideRecord]:
    """Read a CSV/TSV/JSONL manifest into records; DataError on missing columns or files."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"manifest {path} does not exist; pass the path of a CSV or JSONL file.", path
        )
    rows = _rows(path)
    if not rows:
        raise DataError(f"manifest {path} has no rows; add one row per slide.", path)
    columns = set().union(*(row.keys() for row in rows))
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if "report" not in columns and "report_path" not in columns:
        missing.append("report or report_path")
    if missing:
        raise DataError(
            f"manifest {path} lacks column(s) {missing}; it needs slide_id, organ, report (or "
            "report_path), features and split.",
            path,
        )
    base = path.parent
    records, seen = [], set()
    for number, row in enumerate(rows, start=1):
        where = f"manifest {path} row {number}"
        slide_id = (row.get("slide_id") or "").strip()
        if not slide_id:
            raise DataError(f"{where} has an empty slide_id; give every slide an id.", path)
        if slide_id in seen:
            raise DataError(
                f"{where} repeats slide_id {slide_id!r}; slide ids must be unique.", path
            )
        seen.add(slide_id)
        split = (row.get("split") or "").strip().lower()
        if split not in SPLITS:
            raise DataError(f"{where} has split {split!r}; use one of {list(SPLITS)}.", path)
        report = row.get("report") or ""
        if not report.strip() and row.get("report_path"):
            report_file = base / row["report_path"]
            if not report_file.is_file():
                raise DataError(f"{where}: report file {report_file} does not exist.", report_file)
            report = report_file.read_text(encoding="utf-8")
        if not report.strip():
            raise DataError(f"{where} ({slide_id}) has no report text; add report or report_path.")
        features = Path(row["features"]).expanduser()
        features = features if features.is_absolute() else base / features
        if check_files and not features.exists():
            raise DataError(
                f"{where} ({slide_id}): feature file {features} does not exist; extract features "
                "first (medvl features) or fix the path.",
                features,
            )
        organ = (row.get("organ") or "").strip().lower()
        if not organ:
            raise DataError(f"{where} ({slide_id}) has no organ; the sampler needs one.", path)
        label = (row.get("label") or "").strip() or None
        records.append(SlideRecord(slide_id, organ, report, features, split, label))
    return records
