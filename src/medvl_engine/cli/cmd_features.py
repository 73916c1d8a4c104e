"""`medvl features SLIDES... --encoder NAME --out DIR`: cache patch features of many slides.

``--shard i/n`` keeps every n-th slide starting at index i (0-based) of the sorted list, so
machines or torchrun ranks split a cohort with nothing shared but the shard index;
``--shard auto`` takes i and n from torchrun's RANK and WORLD_SIZE. Each store is named
``<slide stem>-<12 hex digits of the slide's content fingerprint>.zarr``, so slides that share a
file name (in different folders, or on different shards) never share a store. Stores that are
already complete are kept; interrupted ones resume.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from medvl_engine.common.console import end_progress_line, printable, report_error

HELP = "extract patch features of slides into zarr stores (resumable, shardable)"

__all__ = ["HELP", "add_arguments", "parse_shard", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slides", nargs="*", metavar="SLIDE", help="slide files")
    parser.add_argument("--encoder", default="medvl-demo", help="registry name, folder or HF id")
    parser.add_argument("--out", required=True, type=Path, help="folder for the .zarr stores")
    parser.add_argument("--shard", default="0/1", help="i/n: this worker's share, or 'auto'")
    parser.add_argument("--patch-size", type=int, default=None, help="px at --mpp")
    parser.add_argument("--mpp", type=float, default=None, help="um per px of the patches")
    parser.add_argument("--min-tissue", type=float, default=0.25, help="tissue share to keep")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--from-h5",
        nargs="+",
        type=Path,
        default=None,
        metavar="H5",
        help="import TRIDENT/CLAM .h5 feature files into --out instead of encoding slides",
    )


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' (0 <= i < n) or 'auto' (RANK/WORLD_SIZE) -> (i, n)."""
    from medvl_engine.errors import ConfigError

    if text == "auto":
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise ConfigError(
            f"--shard '{text}' is not i/n with 0 <= i < n; write e.g. --shard 0/4 or --shard auto."
        )
    return index, count


def run(args: argparse.Namespace) -> int:
    from medvl_engine.common.write_errors import make_output_folder
    from medvl_engine.errors import ConfigError, MedVLError
    from medvl_engine.export.input_guard import check_output_folder_spares_inputs

    check_output_folder_spares_inputs(args.out, [*args.slides, *(args.from_h5 or [])])
    make_output_folder(args.out, "--out folder")  # a file there, or unwritable: one sentence
    if args.from_h5:
        return _import_h5(args)
    if not args.slides:
        raise ConfigError("No slides given; name slide files, or use --from-h5 to import.")
    from medvl_engine.cli._pathology import progress_printer
    from medvl_engine.encoders import load_encoder
    from medvl_engine.features import slide_features, store_file_name
    from medvl_engine.io.slide import open_slide

    index, count = parse_shard(args.shard)
    mine, failures = _openable(sorted(args.slides)[index::count], args)
    if not mine:
        return 2
    encoder = load_encoder(args.encoder, device=args.device)  # seconds: after the cheap checks
    for number, slide_path in enumerate(mine, start=1):
        try:
            with open_slide(slide_path) as slide:
                out_path = args.out / store_file_name(slide)
                store = slide_features(
                    slide,
                    encoder,
                    out_path,
                    patch_size=args.patch_size,
                    target_mpp=args.mpp,
                    min_tissue=args.min_tissue,
                    batch_size=args.batch_size,
                    progress=progress_printer(f"[{number}/{len(mine)}] {Path(slide_path).name}"),
                )
        except MedVLError as error:
            report_error("medvl", error, verbose=getattr(args, "verbose", False))
            failures += 1
            continue
        end_progress_line()
        print(f"{printable(str(out_path))}: {store.n_patches} patches x {store.embed_dim}")
    return 2 if failures else 0


def _openable(slide_paths: list[Path], args: argparse.Namespace) -> tuple[list[Path], int]:
    """The slides that open (metadata only, milliseconds each), and how many did not; each
    failure is reported in one line before any model is loaded."""
    from medvl_engine.cli._pathology import print_reader_notes
    from medvl_engine.errors import MedVLError
    from medvl_engine.io.slide import open_slide

    openable, failures = [], 0
    for slide_path in slide_paths:
        try:
            with open_slide(slide_path) as slide:
                print_reader_notes(slide)
        except MedVLError as error:
            report_error("medvl", error, verbose=getattr(args, "verbose", False))
            failures += 1
            continue
        openable.append(slide_path)
    return openable, failures


def _import_h5(args: argparse.Namespace) -> int:
    from medvl_engine.common.fingerprint import file_fingerprint, short_fingerprint
    from medvl_engine.errors import DataError
    from medvl_engine.features import import_h5_features
    from medvl_engine.guarded_files import require_data_file

    for h5_path in args.from_h5:
        if not h5_path.exists():
            raise DataError(f"Feature file {h5_path} does not exist; check the path.", h5_path)
        # a named pipe or device is refused before it is fingerprinted (which reads it)
        require_data_file(h5_path, "TRIDENT or CLAM .h5 file")
        out_path = args.out / f"{h5_path.stem}-{short_fingerprint(file_fingerprint(h5_path))}.zarr"
        store = import_h5_features(h5_path, out_path, encoder=args.encoder)
        print(f"{out_path}: {store.n_patches} patches x {store.embed_dim} (imported)")
    return 0
