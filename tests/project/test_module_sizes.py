"""Small modules with one job: no source file of either package grows past 500 lines."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_LINES = 500


def test_no_module_is_longer_than_500_lines():
    sizes = {
        path.relative_to(SRC).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for package in ("medvl_engine", "napari_medvl")
        for path in sorted((SRC / package).rglob("*.py"))
    }
    assert len(sizes) > 100
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert too_long == {}, f"split these modules by job (limit {MAX_LINES} lines): {too_long}"
