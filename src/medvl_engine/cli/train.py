"""`medvl-train`: train a registered task with the shared loop, or run one of its actions.

    medvl-train limit --config train/limit_demo.yaml [key=value ...]
    medvl-train topksiglip eval --config train/topksiglip_demo.yaml run.seeds=[0,1,2]
    torchrun --nproc_per_node 2 -m medvl_engine.cli.train limit --config FILE

``medvl-train TASK [ACTION] --config FILE [key=value ...]``: ACTION defaults to ``train``.
A task module may define ``ACTIONS: dict[str, Callable[[RunConfig, TaskConfig], int]]``;
an action prints its own report and returns the exit status (e.g. ``eval``, which scores
saved models on the test split). With ``run.seeds=[s1, s2, ...]``, ``train`` runs once per
seed into ``<run.out_dir>/seed-<s>`` (see :mod:`medvl_engine.training.seeds`).

Tasks are looked up by name in :mod:`medvl_engine.training.registry` and imported
only when chosen. Errors a user can fix print one sentence and exit with status 2: the
config file must be a small regular YAML file and every value is checked against its range
on load (:mod:`medvl_engine.training.config`), before any data are made. Code a config names
(``task.report_filter=path/to/file.py:function``) runs only with ``--allow-code``, and is
announced on stderr before it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from medvl_engine.common.console import command_session, run_reported
from medvl_engine.common.termination import stop_signals_raise
from medvl_engine.errors import ConfigError

__all__ = ["build_parser", "main", "split_action", "task_actions"]

PROGRAM = "medvl-train"
DEFAULT_ACTION = "train"


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
        metavar="[ACTION] key=value",
        help=(
            f"an optional action first (default {DEFAULT_ACTION!r}; 'eval' scores saved models "
            "on the test split), then settings to override, e.g. run.lr=1e-4 task.negatives=2 "
            "run.seeds=[0,1,2] (types are checked)"
        ),
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="on failure also print the underlying reasons, and show the file libraries' warnings",
    )
    parser.add_argument(
        "--allow-code",
        action="store_true",
        help=(
            "let the config run code from a Python file it names (task.report_filter="
            "path/to/file.py:function); without it such a setting is refused, so a config "
            "shared with you cannot run code on its own (installed entry points need no consent)"
        ),
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    return parser


def _print_summary(summary: dict[str, Any]) -> None:
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


def split_action(words: Sequence[str]) -> tuple[str, list[str]]:
    """``(action, overrides)`` from the positional words after the task name: the first word
    is the action when it holds no ``=`` (``train`` when absent)."""
    words = list(words)
    if words and "=" not in words[0]:
        return words[0], words[1:]
    return DEFAULT_ACTION, words


def task_actions(module: ModuleType) -> dict[str, Callable[..., int]]:
    """The actions of a task module: ``train`` plus the module's ``ACTIONS``."""
    actions: dict[str, Callable[..., int]] = {DEFAULT_ACTION: _train_action(module)}
    for name, action in (getattr(module, "ACTIONS", None) or {}).items():
        if name != DEFAULT_ACTION:
            actions[name] = action
    return actions


def _train_action(module: ModuleType) -> Callable[..., int]:
    def train_runs(run_config: Any, task_config: Any) -> int:
        """Train once, or once per seed of ``run.seeds`` (one process group for all)."""
        from medvl_engine.training import train
        from medvl_engine.training.distributed import init_distributed, shutdown_distributed
        from medvl_engine.training.seeds import seed_runs

        runs = seed_runs(run_config, task_config)
        info = init_distributed(run_config.device, run_config.dist_timeout_minutes)
        try:
            for run in runs:
                if run.seed is not None and info.is_main:
                    print(f"seed {run.seed}: training into {run.run_config.out_dir}", flush=True)
                task = module.build_task(run.task_config, run.run_config)
                summary = train(task, run.run_config)
                if summary.get("rank", 0) == 0:
                    report = getattr(module, "report", None)
                    if callable(report):
                        report(task, summary)
                    if run.seed is not None:
                        summary["seed"] = run.seed
                    _print_summary(summary)
        finally:
            shutdown_distributed(info)
        return 0

    return train_runs


def _run(args: argparse.Namespace) -> int:
    return run_reported(
        PROGRAM,
        lambda: _run_action(args),
        debug=args.debug,
        verbose=args.verbose,
        resume_hint="resume with run.resume=auto",
    )


def _run_action(args: argparse.Namespace) -> int:
    from medvl_engine.training.config import read_yaml_config

    read_yaml_config(args.config)  # the file itself first: before torch and the task load
    from medvl_engine.data.report_filter_loader import allow_code

    with allow_code(bool(getattr(args, "allow_code", False))):
        return _run_task_action(args)


def _run_task_action(args: argparse.Namespace) -> int:
    from medvl_engine.training import load_config, task_module

    module = task_module(args.task)
    action_name, overrides = split_action(args.overrides)
    actions = task_actions(module)
    if action_name not in actions:
        raise ConfigError(
            f"task {args.task!r} has no action {action_name!r}; choose one of "
            f"{sorted(actions)} (or give settings as key=value)."
        )
    run_config, task_config = load_config(args.config, overrides, module.CONFIG_CLASS)
    if run_config.threads is not None:
        import torch

        torch.set_num_threads(run_config.threads)
    return int(actions[action_name](run_config, task_config))


if __name__ == "__main__":
    sys.exit(main())
