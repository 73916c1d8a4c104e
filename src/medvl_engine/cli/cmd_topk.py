"""`medvl topk CC MLO --model NAME [--k K] --out FILE`: TopK-Patch boxes on both views of a breast.

The breast image is built at the model's own side and K defaults to the K the model was
evaluated with (:func:`medvl_engine.mammography.evaluated_k`), so the numbers are those of the
model's evaluation; the K and image size used, and whether K is the evaluated one, are printed
and written into every output. The two views are files, or a study on a DICOMweb server
(``medvl topk dicomweb://HOST:PORT/PATH/studies/UID [--breast R|L]``), whose CC and MLO views
are retrieved into the cache first. Outputs by extension (``--out`` may be repeated):

* ``.geojson``: one rectangle Feature per patch in its own view's source px (properties: view,
  image, rank, score), with the importance grid, zero-shot readouts and K under ``"medvl"``;
* ``.csv``: one row per patch (view, rank, score, x0, y0, x1, y1 source px, image, K, the
  zero-shot readouts as ``p_<task>_<class>`` columns, model, notice) and the importance grid
  beside it as ``<stem>_importance.npy`` ``[G, G]`` float32;
* ``.png``: the breast image the model scored (CC over MLO), enlarged by a whole factor to at
  least 768 px, with the importance map and the ranked boxes;
* ``.dcm``: a DICOM TID 1500 structured report of the boxes and readouts (DICOM views only).

``--dicom-dir DIR`` writes the structured report, a presentation state per view and the
importance as a parametric map per view (:func:`medvl_engine.export.dicom.write_topk_dicom`);
``--send URL`` then uploads the DICOM outputs to a DICOMweb server. Every file is written to a
temporary name in its folder; all are renamed into place together once every one is complete,
so an interrupted run leaves the previous outputs as they were.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "TopK-Patch on a CC + MLO pair: ranked boxes in source px and the importance map"
_FORMATS = (".geojson", ".csv", ".png", ".dcm")

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from medvl_engine.cli._dicomweb import add_send_options

    parser.add_argument(
        "cc",
        help="CC view (DICOM or PNG), or a study on a DICOMweb server "
        "(dicomweb://HOST:PORT/PATH/studies/UID) holding both views",
    )
    parser.add_argument(
        "mlo", nargs="?", help="MLO view of the same breast (DICOM or PNG); none with a study"
    )
    parser.add_argument(
        "--breast",
        choices=("R", "L"),
        help="the breast to read of a DICOMweb study that holds both",
    )
    parser.add_argument(
        "--model",
        default="topksiglip-demo",
        help="TopKSigLIP model folder or registered name (default: topksiglip-demo, the model "
        "`medvl-train topksiglip --config train/topksiglip_demo.yaml` saves)",
    )
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="patches to select (default: the K the model was evaluated with)",
    )
    parser.add_argument(
        "--out",
        action="append",
        default=[],
        help="output file: .geojson, .csv, .png or .dcm (a DICOM structured report; DICOM "
        "views only); repeat for several",
    )
    parser.add_argument(
        "--dicom-dir",
        help="folder for the DICOM structured report, a presentation state per view and the "
        "importance as a parametric map per view (DICOM views only)",
    )
    parser.add_argument("--voi-index", type=int, default=0, help="DICOM VOI window to apply")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_send_options(parser)


def _check_outputs(args: argparse.Namespace) -> list[Path]:
    """The ``--out`` paths, checked (suffix, folder) before any work; ConfigError otherwise."""
    from medvl_engine.errors import ConfigError

    outputs = [Path(p) for p in args.out]
    if not outputs and not args.dicom_dir:
        raise ConfigError("nothing to write: give --out FILE (repeatable) or --dicom-dir DIR.")
    for path in outputs:
        if path.suffix.lower() not in _FORMATS:
            raise ConfigError(
                f"output {path} has an unsupported extension; use one of {', '.join(_FORMATS)}."
            )
        if not path.parent.exists():
            raise ConfigError(f"output folder {path.parent} does not exist; create it first.")
    if args.dicom_dir and not Path(args.dicom_dir).parent.exists():
        raise ConfigError(
            f"the folder holding --dicom-dir {args.dicom_dir} does not exist; create it first."
        )
    if args.k is not None and args.k < 1:
        raise ConfigError(f"--k must be at least 1, got {args.k}.")
    return outputs


def _views(args: argparse.Namespace) -> tuple[str, str]:
    """(CC, MLO) files: the two given, or the chosen breast of a DICOMweb study, retrieved
    into the cache (:func:`medvl_engine.cli._dicomweb.topk_views`)."""
    from medvl_engine.cli._dicomweb import timeout_of, topk_views
    from medvl_engine.errors import ConfigError
    from medvl_engine.io.dicomweb import is_dicomweb_reference

    if args.breast is not None and not is_dicomweb_reference(args.cc):
        raise ConfigError("--breast chooses the breast of a DICOMweb study; drop it for files.")
    cc, mlo, _ = topk_views(args.cc, args.mlo, args.breast, timeout_of(args))
    return cc, mlo


def run(args: argparse.Namespace) -> int:
    from medvl_engine.cli._dicomweb import checked_send_target, send_written, timeout_of

    target = checked_send_target(args)  # a bad URL stops the command before any work
    outputs = _check_outputs(args)
    dicom_outputs = [path for path in outputs if path.suffix.lower() == ".dcm"]
    file_outputs = [path for path in outputs if path.suffix.lower() != ".dcm"]
    cc_path, mlo_path = _views(args)
    from medvl_engine.export.input_guard import check_outputs_spare_inputs, dependent_outputs

    guarded = [file for path in outputs for file in dependent_outputs(path)]
    if args.dicom_dir:
        from medvl_engine.export.dicom import TOPK_DICOM_NAMES

        guarded.extend(Path(args.dicom_dir) / name for name in TOPK_DICOM_NAMES.values())
    check_outputs_spare_inputs(guarded, [cc_path, mlo_path])
    if dicom_outputs or args.dicom_dir:  # before the model loads
        from medvl_engine.export.dicom import require_dicom, require_highdicom

        require_dicom({"CC": Path(cc_path), "MLO": Path(mlo_path)})
        require_highdicom()

    from medvl_engine.cli._pathology import print_reader_notes
    from medvl_engine.common.atomic import atomic_group
    from medvl_engine.export import write_topk_outputs
    from medvl_engine.export.topk import TOPK_PNG_SIDE, k_sentence
    from medvl_engine.mammography import open_views, topk

    cc, mlo = open_views(cc_path, mlo_path, voi_index=args.voi_index)
    for mammogram in (cc, mlo):
        print_reader_notes(mammogram)
    # the pair is checked before the model loads; the breast image is the model's own side
    run = topk(cc, mlo, args.model, k=args.k, device=args.device)
    result = run.result
    sources = {"CC": Path(cc_path), "MLO": Path(mlo_path)}
    with atomic_group():  # renamed into place together, once every output is written
        written = write_topk_outputs(
            result,
            run.breast.image,
            sources,
            file_outputs,
            model=args.model,
            display_side=TOPK_PNG_SIDE,
        )
        if dicom_outputs or args.dicom_dir:
            from medvl_engine.export.dicom import write_topk_dicom, write_topk_sr

            for path in dicom_outputs:
                written.append(write_topk_sr(run, path, model_name=args.model))
            if args.dicom_dir:
                written.extend(write_topk_dicom(run, args.dicom_dir, model_name=args.model))
    for path in written:
        print(f"wrote {path}")
    side = run.image_size
    print(f"{k_sentence(run.k, run.evaluated_k)}; breast image {side} x {side} px")
    for view in ("CC", "MLO"):
        print(f"{view}: {len(result.ranks[view])} patch(es), ranks {result.ranks[view].tolist()}")
    for task in ("cancer", "mass", "calcification"):
        if task in result.zero_shot:
            print(f"zero-shot P({task}) = {result.zero_shot[task]['positive']:.3f}")
    from medvl_engine.demo_models import demo_notice_for

    notice = demo_notice_for(args.model)
    print(f"model {args.model}" + (f": {notice}" if notice else ""))
    send_written(written, target, timeout_of(args))
    return 0
