"""The breasts a TopKSigLIP run reads: synthetic cohorts, stratified subsets, shuffled reports.

:func:`synthetic_records` writes (once) and lists a synthetic cohort of one split;
:func:`stratified_subset` keeps a seeded share of the training rows (the pretraining-size
ablation); :func:`shuffle_sentences` reorders a report's sentences (``task.report_shuffle``).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from medvl_engine.data.mammo_manifest import MammoRecord
from medvl_engine.data.mammo_reports import normalise_findings, parsed_report

__all__ = ["shuffle_sentences", "stratified_subset", "synthetic_records"]


def synthetic_records(
    folder: Path, count: int, seed: int, split: str, size: tuple[int, int] = (1024, 640)
) -> list[MammoRecord]:
    """``count`` synthetic breasts (both views, DICOM) in ``folder``, written on first use.

    Case i uses seed ``seed * 100_003 + i`` and alternates laterality; labels, findings and ROI
    boxes come from :func:`medvl_engine.synthetic.make_mammogram_case` (views of ``size`` =
    (rows, cols)). Each case folder keeps a ``case.json`` so a later run reuses the files.
    """
    from medvl_engine.synthetic import make_mammogram_case

    records = []
    for i in range(count):
        case_dir = folder / f"case_{i:05d}"
        saved = case_dir / "case.json"
        if saved.is_file():
            values = json.loads(saved.read_text(encoding="utf-8"))
        else:
            case_dir.mkdir(parents=True, exist_ok=True)
            case = make_mammogram_case(
                case_dir, seed=seed * 100_003 + i, laterality="LR"[i % 2], size=(size[0], size[1])
            )
            values = {
                "exam_id": str(case.exam_id),
                "laterality": case.laterality,
                "cc_path": Path(case.cc_path).name,
                "mlo_path": Path(case.mlo_path).name,
                "birads": int(case.birads),
                "density": str(case.density),
                "cancer": bool(case.cancer),
                "findings": list(case.findings),
                "roi_boxes": {
                    v: [list(map(float, b)) for b in items]
                    for v, items in case.boxes.items()
                    if items
                },
            }
            saved.write_text(json.dumps(values), encoding="utf-8")
        findings = normalise_findings(values["findings"])
        records.append(
            MammoRecord(
                exam_id=values["exam_id"],
                laterality=values["laterality"],
                cc_path=case_dir / values["cc_path"],
                mlo_path=case_dir / values["mlo_path"],
                birads=values["birads"],
                density=values["density"],
                cancer=values["cancer"],
                findings=findings,
                report=parsed_report(
                    findings, values["density"], values["birads"], values["cancer"]
                ),
                roi_boxes=values["roi_boxes"],
                split=split,
            )
        )
    return records


def stratified_subset(records: list[MammoRecord], fraction: float, seed: int) -> list[MammoRecord]:
    """A seeded share ``fraction`` of ``records``, stratified by (cancer, BI-RADS).

    ``max(1, round(fraction * n))`` rows are kept in all; each stratum (a missing label forms its
    own) gets ``floor(fraction * n_s)`` of its ``n_s`` rows and the rest go one each to the
    strata with the largest remainders. Rows are drawn with ``random.Random(seed)`` and stay in
    manifest order.
    """
    strata: dict[tuple[Any, Any], list[int]] = {}
    for index, record in enumerate(records):
        strata.setdefault((record.cancer, record.birads), []).append(index)
    keys = sorted(strata, key=repr)
    quotas = {key: math.floor(fraction * len(strata[key])) for key in keys}
    remaining = max(1, round(fraction * len(records))) - sum(quotas.values())
    by_remainder = sorted(
        keys, key=lambda key: fraction * len(strata[key]) - quotas[key], reverse=True
    )
    for key in by_remainder[: max(remaining, 0)]:
        quotas[key] += 1
    rng = random.Random(seed)
    kept: list[int] = []
    for key in keys:
        kept.extend(rng.sample(strata[key], quotas[key]))
    return [records[i] for i in sorted(kept)]


def shuffle_sentences(report: str, rng: random.Random) -> str:
    """The report with its sentences (split after '.') in a random order."""
    sentences = [part.strip() for part in report.replace(". ", ".\n").splitlines() if part.strip()]
    rng.shuffle(sentences)
    return " ".join(sentences)
