"""`medvl topk CC MLO --model NAME --k 15 --out FILE`: TopK-Patch boxes on both views of a breast.

Outputs by extension (``--out`` may be repeated):

* ``.geojson``: one rectangle Feature per patch in its own view's source px (properties: view,
  image, rank, score), with the importance grid and zero-shot readouts under ``"medvl"``;
* ``.csv``: one row per patch (view, rank, score, x0, y0, x1, y1 source px, image) and the
  importance grid beside it as ``<stem>_importance.npy`` ``[G, G]`` float32;
* ``.png``: the breast image (CC over MLO) with the importance map and the ranked boxes.

Every file is written to a temporary name in its folder; all are renamed into place together
once every one is complete, so an interrupted run leaves the previous outputs as they were.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "TopK-Patch on a CC + MLO pair: ranked boxes in source px and the importance map"
_FORMATS = (".geojson", ".csv", ".png")

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cc", help="CC view (DICOM or PNG)")
    parser.add_argument("mlo", help="MLO view of the same breast (DICOM or PNG)")
    parser.add_argument(
        "--model",
        default="topksiglip-demo",
        help="TopKSigLIP model folder or registered name (default: topksiglip-demo, the model "
        "`medvl-train topksiglip --config train/topksiglip_demo.yaml` saves)",
    )
    parser.add_argument("--k", type=int, default=15, help="patches to select (default 15)")
    parser.add_argument(
        "--out",
        action="append",
        required=True,
        help="output file: .geojson, .csv or .png (repeat for several)",
    )
    parser.add_argument("--voi-index", type=int, default=0, help="DICOM VOI window to apply")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")


def run(args: argparse.Namespace) -> int:
    from medvl_engine.errors import ConfigError

    outputs = [Path(p) for p in args.out]
    for path in outputs:
        if path.suffix.lower() not in _FORMATS:
            raise ConfigError(
                f"output {path} has an unsupported extension; use one of {', '.join(_FORMATS)}."
            )
        if not path.parent.exists():
            raise ConfigError(f"output folder {path.parent} does not exist; create it first.")
    if args.k < 1:
        raise ConfigError(f"--k must be at least 1, got {args.k}.")
    from medvl_engine.export.input_guard import check_outputs_spare_inputs, dependent_outputs

    written = [file for path in outputs for file in dependent_outputs(path)]
    check_outputs_spare_inputs(written, [args.cc, args.mlo])

    from medvl_engine.cli._pathology import print_reader_notes
    from medvl_engine.common.atomic import atomic_group
    from medvl_engine.export import write_topk_outputs
    from medvl_engine.mammography import open_views, topk

    cc, mlo = open_views(args.cc, args.mlo, voi_index=args.voi_index)
    for mammogram in (cc, mlo):
        print_reader_notes(mammogram)
    # the pair is checked before the model loads; the breast image is the model's own side
    run = topk(cc, mlo, args.model, k=args.k, device=args.device)
    result = run.result
    sources = {"CC": Path(args.cc), "MLO": Path(args.mlo)}
    with atomic_group():  # renamed into place together, once every output is written
        written = write_topk_outputs(result, run.breast.image, sources, outputs, model=args.model)
    for path in written:
        print(f"wrote {path}")
    for view in ("CC", "MLO"):
        print(f"{view}: {len(result.ranks[view])} patch(es), ranks {result.ranks[view].tolist()}")
    for task in ("cancer", "mass", "calcification"):
        if task in result.zero_shot:
            print(f"zero-shot P({task}) = {result.zero_shot[task]['positive']:.3f}")
    from medvl_engine.demo_models import demo_notice_for

    notice = demo_notice_for(args.model)
    print(f"model {args.model}" + (f": {notice}" if notice else ""))
    return 0
