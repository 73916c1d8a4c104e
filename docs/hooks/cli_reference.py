"""MkDocs hook: the CLI reference page, written from the argparse parsers themselves.

``docs/reference/cli.md`` holds the marker ``<!-- cli-reference -->``; this hook replaces it
with the ``--help`` text of ``medvl``, of each ``medvl`` subcommand and of ``medvl-train``, so
the page always says what the installed commands say. Building the parsers imports only the
command modules (each keeps its heavy imports inside ``run``): no torch, no network.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
WIDTH = 100  # help text wrapped at a fixed width, whatever the terminal building the site

_SRC = Path(__file__).resolve().parents[2] / "src"


def _fixed_width(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_block(parser: argparse.ArgumentParser) -> str:
    return f"```text\n{_fixed_width(parser).format_help().rstrip()}\n```\n"


def cli_reference_markdown() -> str:
    """Markdown for every command: a heading, its one-line description and its help text."""
    if str(_SRC) not in sys.path:
        sys.path.insert(0, str(_SRC))
    from medvl_engine.cli import main as medvl_main
    from medvl_engine.cli import train as medvl_train

    parser = medvl_main.build_parser()
    parts = ["### `medvl`\n", _help_block(parser)]
    for name, sub in _subcommands(parser).items():
        parts.append(f"#### `medvl {name}`\n")
        parts.append(_help_block(sub))
    parts.append("### `medvl-train`\n")
    parts.append(_help_block(medvl_train.build_parser()))
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker on the CLI page with the generated reference."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference_markdown())
