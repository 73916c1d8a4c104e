"""Import discipline: fast command-line help, one dependency direction, complete public names."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "src" / "medvl_engine"
HEAVY = ("numpy", "torch", "transformers", "dask", "zarr", "napari", "qtpy")


def _modules_loaded_by(code: str) -> set[str]:
    """Top-level package names in sys.modules after running ``code`` in a fresh interpreter."""
    report = "import json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    probe = f"{code}\n{report}"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import medvl_engine",
        "from medvl_engine.cli.main import build_parser; build_parser()",
        "from medvl_engine.cli.train import build_parser; build_parser()",
        "import medvl_engine.models, medvl_engine.training",
    ],
)
def test_help_and_package_faces_load_no_heavy_library(code):
    loaded = _modules_loaded_by(code)
    assert not loaded & set(HEAVY), f"{code!r} imports {sorted(loaded & set(HEAVY))}"


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_never_imports_the_viewer_side():
    offenders = {
        str(path.relative_to(ENGINE)): sorted(
            name
            for name in _imported_modules(path)
            if name.split(".")[0]
            in ("napari", "qtpy", "magicgui", "PyQt5", "PyQt6", "napari_medvl")
        )
        for path in ENGINE.rglob("*.py")
    }
    assert {file: names for file, names in offenders.items() if names} == {}


def test_every_engine_package_names_its_public_api_and_each_name_resolves():
    packages = sorted(
        ".".join(("medvl_engine", *init.parent.relative_to(ENGINE).parts))
        for init in ENGINE.rglob("__init__.py")
    )
    assert "medvl_engine.models" in packages and "medvl_engine.training" in packages
    probe = (
        "import importlib, json\n"
        f"missing = {{}}\nfor name in {packages!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    exported = getattr(module, '__all__', None)\n"
        "    if exported is None:\n"
        "        missing[name] = 'no __all__'\n"
        "        continue\n"
        "    bad = [n for n in exported if not hasattr(module, n)]\n"
        "    if bad:\n"
        "        missing[name] = bad\n"
        "print(json.dumps(missing))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {}
