"""The documentation site: its Python tutorial runs as written, and the site builds without a
warning (``mkdocs build --strict``)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorials" / "python_api.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```[ \t]*$", re.S | re.M)


def tutorial_cells(text: str) -> list[tuple[str, str | None]]:
    """(code, expected output) for each ``python`` block, in order; the expected output is the
    ``text`` block that follows it before the next ``python`` block, or None."""
    cells: list[tuple[str, str | None]] = []
    for language, body in FENCE.findall(text):
        if language == "python":
            cells.append((body, None))
        elif language == "text" and cells and cells[-1][1] is None:
            cells[-1] = (cells[-1][0], body)
    return cells


def test_the_tutorial_parser_pairs_each_block_with_its_output():
    text = "```python\nprint(1)\n```\n\nprose\n\n```text\n1\n```\n```python\nx = 2\n```\n"
    assert tutorial_cells(text) == [("print(1)\n", "1\n"), ("x = 2\n", None)]


def test_python_api_tutorial_runs_in_order_and_prints_what_it_states(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the tutorial's folder, if it fails
    cells = tutorial_cells(TUTORIAL.read_text(encoding="utf-8"))
    assert len(cells) >= 10 and sum(expected is not None for _, expected in cells) >= 8

    namespace: dict[str, object] = {"__name__": "__tutorial__"}
    for number, (code, expected) in enumerate(cells, start=1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"{TUTORIAL.name}, block {number}", "exec"), namespace)
        if expected is not None:
            assert printed.getvalue() == expected, f"block {number}:\n{code}"
    work = namespace["work"]
    assert isinstance(work, Path) and not work.exists()  # the last cell tidies up


def test_site_builds_without_warnings(tmp_path):
    if not all(importlib.util.find_spec(name) for name in ("mkdocs", "mkdocstrings", "material")):
        pytest.skip("mkdocs, mkdocs-material or mkdocstrings is missing: pip install -e '.[dev]'")
    site = tmp_path / "site"
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    for page in (
        "index.html",
        "tutorials/pathologist/index.html",
        "tutorials/radiologist/index.html",
        "tutorials/researcher/index.html",
        "tutorials/python_api/index.html",
        "reference/cli/index.html",
        "reference/api/index.html",
        "performance/index.html",
    ):
        assert (site / page).is_file(), page
    cli = (site / "reference/cli/index.html").read_text(encoding="utf-8")
    assert "cli-reference" not in cli  # the hook replaced its marker
    for command in ("medvl heatmap", "medvl topk", "medvl features", "medvl-train"):
        assert command in cli, command
    api = (site / "reference/api/io/index.html").read_text(encoding="utf-8")
    assert 'id="medvl_engine.io.open_slide"' in api
    assert ":func:`" not in api and ":class:`" not in api  # Sphinx roles shown as code
