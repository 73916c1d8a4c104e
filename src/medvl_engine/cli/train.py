"""`medvl-train`: train a registered task with the shared loop.

    medvl-train limit --config train/limit_demo.yaml [key=value ...]
    torchrun --nproc_per_node 2 -m medvl_engine.cli.train limit --config FILE

Tasks are looked up by name in :mod:`medvl_engine.training.registry` and imported
only when chosen. Errors a user can fix print one sentence and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from medvl_engine._termination import Terminated, stop_signals_raise
from medvl_engine.cli._console import command_session, report_error, report_stop
from medvl_engine.errors import MedVLError

__all__ = ["build_parser", "main"]

PROGRAM = "medvl-train"


def build_parser() -> argparse.ArgumentParser:
    """The `medvl-train` argument parser."""
    from medvl_engine.training.registry import task_names

    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Train LIMIT or TopKSigLIP with the shared loop (CPU, GPU, torchrun).",
    )
    parser.add_argument("task", choices=task_names(), help="which model to train")
    parser.add_argument("--config", required=True, help="YAML file with 'run' and 'task' sections")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="override a setting, e.g. run.lr=1e-4 task.negatives=2 (types are checked)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="on failure also print the underlying reasons, and show the file libraries' warnings",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    return parser


def _print_summary(summary: dict) -> None:
    shown = {k: v for k, v in summary.items() if k not in ("losses", "evaluations")}
    losses = summary.get("losses") or []
    if losses:
        shown["first_loss"], shown["last_loss"] = losses[0], losses[-1]
    print(json.dumps(shown, indent=2, default=str))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `medvl-train`; returns the process exit status.

    SIGTERM (sent by torchrun to the other ranks when one fails, or by a job scheduler) stops
    the run through its cleanup, like Ctrl-C: no half-written checkpoint is left behind.
    """
    args = build_parser().parse_intermixed_args(argv)
    with stop_signals_raise(), command_session(verbose=args.verbose or args.debug):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        from medvl_engine.training import load_config, task_module, train

        module = task_module(args.task)
        run_config, task_config = load_config(args.config, args.overrides, module.CONFIG_CLASS)
        task = module.build_task(task_config, run_config)
        summary = train(task, run_config)
        if summary.get("rank", 0) == 0:
            report = getattr(module, "report", None)
            if callable(report):
                report(task, summary)
            _print_summary(summary)
        return 0
    except MedVLError as error:
        if args.debug:
            raise
        report_error(PROGRAM, error, verbose=args.verbose)
        return error.exit_code
    except KeyboardInterrupt:
        report_stop(PROGRAM, "interrupted (resume with run.resume=auto)")
        return 130
    except Terminated as stop:
        report_stop(PROGRAM, "stopped by SIGTERM (resume with run.resume=auto)")
        return int(stop.code)


if __name__ == "__main__":
    sys.exit(main())
