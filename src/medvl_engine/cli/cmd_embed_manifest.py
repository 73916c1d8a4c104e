"""`medvl embed-manifest`: the TopKSigLIP breast-level manifest from EMBED's own tables.

See :mod:`medvl_engine.data.embed_manifest` for the rules (views, labels, ROIs, splits).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "build a breast-level TopKSigLIP manifest from EMBED's metadata and clinical tables"

__all__ = ["HELP", "add_arguments", "run"]


def _cohorts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of cohort numbers, e.g. 1,2"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", type=Path, required=True, help="EMBED_OpenData_metadata.csv")
    parser.add_argument("--clinical", type=Path, required=True, help="EMBED_OpenData_clinical.csv")
    parser.add_argument(
        "--image-root",
        type=Path,
        required=True,
        help="folder holding the images named by anon_dicom_path",
    )
    parser.add_argument("--out", type=Path, required=True, help="manifest CSV to write")
    parser.add_argument("--train-cohorts", type=_cohorts, default=(1, 2), metavar="N,N")
    parser.add_argument("--val-cohorts", type=_cohorts, default=(8,), metavar="N,N")
    parser.add_argument("--test-cohorts", type=_cohorts, default=(9, 10), metavar="N,N")
    parser.add_argument(
        "--roi-order",
        choices=("yxyx", "xyxy"),
        default="yxyx",
        help="order of the four numbers of a ROI_coords box (EMBED: y0, x0, y1, x1)",
    )
    parser.add_argument(
        "--dicom-prefix",
        default="/mnt/NAS2/mammo/anon_dicom/",
        help="start of anon_dicom_path that --image-root replaces",
    )


def run(args: argparse.Namespace) -> int:
    from medvl_engine.data.embed_manifest import build_embed_manifest
    from medvl_engine.export.input_guard import check_outputs_spare_inputs

    check_outputs_spare_inputs([args.out], [args.metadata, args.clinical])
    counts = build_embed_manifest(
        args.metadata,
        args.clinical,
        args.image_root,
        args.out,
        splits={"train": args.train_cohorts, "val": args.val_cohorts, "test": args.test_cohorts},
        roi_order=args.roi_order,
        dicom_prefix=args.dicom_prefix,
    )
    print(f"medvl embed-manifest: wrote {counts.get('breasts_written', 0)} breasts to {args.out}")
    for name, value in sorted(counts.items()):
        print(f"  {name}: {value}")
    return 0
