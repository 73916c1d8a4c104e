"""`medvl`: the headless command line.

Subcommands live in modules named ``cmd_<name>.py`` in this package. Each one
defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``,
keeps heavy imports inside ``run`` so that ``medvl --help`` stays fast, and is
discovered here without a central list to edit.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from medvl_engine.errors import MedVLError

__all__ = ["build_parser", "main"]


def _command_modules() -> list[tuple[str, object]]:
    import medvl_engine.cli as cli_package

    found = []
    for info in sorted(pkgutil.iter_modules(cli_package.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            module = importlib.import_module(f"medvl_engine.cli.{info.name}")
            found.append((info.name.removeprefix("cmd_").replace("_", "-"), module))
    return found


def build_parser() -> argparse.ArgumentParser:
    """The `medvl` parser with every discovered subcommand."""
    parser = argparse.ArgumentParser(
        prog="medvl",
        description="Slides and mammograms, vision-language heatmaps and TopK patches, headless.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _command_modules():
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def report_error(error: BaseException) -> None:
    """Print a user-facing error as one line on stderr."""
    print(f"medvl: error: {error}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `medvl`; returns the process exit status (2 on a MedVLError)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except MedVLError as error:
        if args.debug:
            raise
        report_error(error)
        return error.exit_code
    except KeyboardInterrupt:
        print("medvl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output (e.g. `| head`) went away: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
