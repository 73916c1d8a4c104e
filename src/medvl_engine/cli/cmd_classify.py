"""`medvl classify SLIDE --classes A B ...`: zero-shot slide classification (LIMIT Eq. 5)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from medvl_engine.cli._pathology import add_feature_arguments

HELP = "rank class prompts for a whole slide by report-guided pooling (LIMIT zero-shot)"

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slide", type=Path, help="slide file")
    parser.add_argument("--classes", nargs="+", default=None, help="class prompts (>= 2)")
    parser.add_argument(
        "--preset",
        default=None,
        help="class prompts of an organ preset instead of --classes (e.g. 'breast (SPIDER-C)'; "
        "an unknown name lists them)",
    )
    parser.add_argument("--model", default="medvl-demo", help="registry name, folder or HF id")
    add_feature_arguments(parser)
    parser.add_argument(
        "--tau-attn",
        type=float,
        default=None,
        help="attention temperature (default: the model folder's tau_attn, else 0.05)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--templates",
        default="conch",
        metavar="conch|none|FILE",
        help="prompt templates each class name is put in, averaged into one text embedding: "
        "CONCH's H&E list (conch, the default), none (the names as typed), or a file (one "
        "template with {} per line, or a YAML list)",
    )
    parser.add_argument("--device", default="cpu")


def run(args: argparse.Namespace) -> int:
    from medvl_engine.cli._pathology import (
        feature_options,
        open_checked_slide,
        print_model_notice,
        report_features,
    )
    from medvl_engine.errors import ConfigError

    if (args.classes is None) == (args.preset is None):
        raise ConfigError("give the classes with --classes A B ... or --preset NAME (one of them).")
    if args.preset is not None:
        from medvl_engine.prompts import preset_prompts

        args.classes = list(preset_prompts(args.preset))
    if len(args.classes) < 2:
        raise ConfigError("--classes needs at least two class prompts to choose between.")
    from medvl_engine.prompts import resolve_templates

    templates = resolve_templates(args.templates)
    tau = args.tau_attn if args.tau_attn is not None else _model_tau(args.model)
    if tau <= 0:
        raise ConfigError(f"--tau-attn must be positive, got {tau}.")
    with open_checked_slide(args) as slide:
        from medvl_engine.pathology import classify

        result = classify(
            slide,
            args.classes,
            args.model,
            tau_attn=tau,
            templates=templates if templates is not None else "none",
            **feature_options(args),
        )
        report_features(args, result.store, result.model, result.extracted)
    ranked = result.ranked
    if args.json:
        print(json.dumps([{"class": name, "score": score} for name, score in ranked]))
    else:
        width = max(len(name) for name, _ in ranked)
        for rank, (name, score) in enumerate(ranked, start=1):
            print(f"{rank:>2}. {name:<{width}}  {score:.4f}")
    print_model_notice(args, result.store.encoder or args.model)
    return 0


def _model_tau(model: str) -> float:
    """tau_attn recorded in a LIMIT-trained model folder, else the LIMIT default 0.05."""
    from medvl_engine.slide_classification import model_tau_attn

    return model_tau_attn(model)
