"""`medvl`: the headless command line.

Subcommands live in modules named ``cmd_<name>.py`` in this package. Each one
defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``,
keeps heavy imports inside ``run`` so that ``medvl --help`` stays fast, and is
discovered here without a central list to edit.

On failure stderr holds one line, our sentence (exit status 2); ``--verbose`` adds the
underlying reasons and lets the file-format libraries' warnings through, ``--debug`` raises
with the traceback. SIGTERM stops a command like Ctrl-C does, through its cleanup (exit 143).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from medvl_engine.common.console import command_session, run_reported
from medvl_engine.common.termination import stop_signals_raise

__all__ = ["build_parser", "main"]

PROGRAM = "medvl"


class CommandModule(Protocol):
    """What a ``cmd_<name>.py`` module defines."""

    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _command_modules() -> list[tuple[str, CommandModule]]:
    import medvl_engine.cli as cli_package

    found: list[tuple[str, CommandModule]] = []
    for info in sorted(pkgutil.iter_modules(cli_package.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            module = cast(CommandModule, importlib.import_module(f"medvl_engine.cli.{info.name}"))
            found.append((info.name.removeprefix("cmd_").replace("_", "-"), module))
    return found


def add_output_options(parser: argparse.ArgumentParser, *, in_subcommand: bool) -> None:
    """``--verbose`` and ``--debug``, accepted before and after the subcommand's name."""
    # a subcommand's copy must not overwrite what was given before the subcommand
    default = argparse.SUPPRESS if in_subcommand else False
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=default,
        help="on failure also print the underlying reasons, and show the file libraries' warnings",
    )
    parser.add_argument(
        "--debug", action="store_true", default=default, help="show full tracebacks"
    )


def build_parser() -> argparse.ArgumentParser:
    """The `medvl` parser with every discovered subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Slides and mammograms, vision-language heatmaps and TopK patches, headless.",
    )
    add_output_options(parser, in_subcommand=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _command_modules():
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        add_output_options(sub, in_subcommand=True)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `medvl`; returns the process exit status (2 on a MedVLError)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        with stop_signals_raise(), command_session(verbose=args.verbose or args.debug):
            return _run_command(args)
    except BrokenPipeError:
        # the reader of our output (e.g. `| head`) went away: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _run_command(args: argparse.Namespace) -> int:
    return run_reported(PROGRAM, lambda: args._run(args), debug=args.debug, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
