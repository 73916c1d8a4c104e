"""Import discipline: fast command-line help, one dependency direction, complete public names."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "src" / "medvl_engine"
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


def _engine_packages() -> list[str]:
    return sorted(
        ".".join(("medvl_engine", *init.parent.relative_to(ENGINE).parts))
        for init in ENGINE.rglob("__init__.py")
    )


VIEWER_PACKAGES = (
    "napari",
    "qtpy",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "PySide6",
    "magicgui",
    "superqt",
    "vispy",
)

_BLOCK_VIEWER = f"""
import importlib.abc, sys

class _NoViewer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {VIEWER_PACKAGES!r}:
            raise ImportError(f"{{name}} is not installed (blocked)")
        return None

sys.meta_path.insert(0, _NoViewer())
"""


# One fresh process, where no viewer package can be imported, serves two tests: first it imports
# every engine package alone and checks its __all__ (before the other modules are imported, as
# their import would set attributes on their packages); then it imports every engine module and
# runs `medvl info` on a synthetic slide and mammogram.
_PUBLIC_NAMES = """
import importlib, json
missing = {{}}
for name in {packages!r}:
    module = importlib.import_module(name)
    exported = getattr(module, '__all__', None)
    if exported is None:
        missing[name] = 'no __all__'
        continue
    bad = [n for n in exported if not hasattr(module, n)]
    if bad:
        missing[name] = bad
print('missing public names:' + json.dumps(missing))
"""


@pytest.fixture(scope="module")
def engine_probe(tmp_path_factory) -> subprocess.CompletedProcess:
    folder = tmp_path_factory.mktemp("engine-probe")
    probe = (
        _BLOCK_VIEWER
        + _PUBLIC_NAMES.format(packages=_engine_packages())
        + (
            "import importlib, pkgutil, sys\n"
            "import medvl_engine\n"
            "for info in pkgutil.walk_packages(medvl_engine.__path__, 'medvl_engine.'):\n"
            "    if not info.name.endswith('__main__'):\n"
            "        importlib.import_module(info.name)\n"
            "from medvl_engine.synthetic import make_mammogram_case, make_synthetic_slide\n"
            f"slide = make_synthetic_slide({str(folder / 'slide.tiff')!r}, seed=0, "
            "size=(512, 512))\n"
            f"case = make_mammogram_case({str(folder)!r}, seed=0, size=(256, 160))\n"
            "from medvl_engine.cli.main import main\n"
            "status = main(['info', '--json', str(slide.path), str(case.cc_path)])\n"
            "blocked = sorted(n for n in sys.modules if n.split('.')[0] in "
            f"{VIEWER_PACKAGES!r})\n"
            "print('loaded viewer modules:', blocked)\n"
            "sys.exit(status)\n"
        )
    )
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "MEDVL_CACHE": str(folder / "cache")}
    return subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
    )


def test_engine_imports_and_runs_without_any_viewer_package(engine_probe):
    done = engine_probe
    assert done.returncode == 0, done.stderr[-3000:]
    start = done.stdout.index("missing public names:")
    start = done.stdout.index("\n", start) + 1
    described = json.loads(done.stdout[start : done.stdout.rindex("loaded viewer modules:")])
    assert [entry["kind"] for entry in described] == ["slide", "mammogram"]
    assert "loaded viewer modules: []" in done.stdout


def test_every_engine_package_names_its_public_api_and_each_name_resolves(engine_probe):
    assert "medvl_engine.models" in _engine_packages()
    assert "medvl_engine.training" in _engine_packages()
    done = engine_probe
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("missing public names:")]
    assert lines, done.stderr[-3000:]
    (line,) = lines
    assert json.loads(line.removeprefix("missing public names:")) == {}


def test_the_plugin_reaches_the_engine_through_its_api_not_the_command_line():
    plugin = ENGINE.parent / "napari_medvl"
    offenders = {
        str(path.relative_to(plugin)): sorted(
            name for name in _imported_modules(path) if name.startswith("medvl_engine.cli")
        )
        for path in plugin.rglob("*.py")
    }
    assert {file: names for file, names in offenders.items() if names} == {}


def _private_engine_imports(
    path: Path, src: Path, subpackages_are_inside: bool = False
) -> list[str]:
    """Imports (at any depth, inside functions too) by the module at ``path`` of a private
    engine module or name: a dotted component after ``medvl_engine`` that starts with ``_``
    (dunders such as ``__version__`` aside). A private module of the importer's own package
    (``medvl_engine.cli._pathology`` from ``medvl_engine.cli.cmd_heatmap``) is its own; with
    ``subpackages_are_inside`` so is one of a package that encloses the importer's
    (``medvl_engine.io._dicom_values`` from ``medvl_engine.io.slide._dicom_wsi``)."""
    package = ".".join(path.relative_to(src).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            targets = [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if parts[0] != "medvl_engine":
                continue
            for index, part in enumerate(parts[1:], start=1):
                private = part.startswith("_") and not (
                    part.startswith("__") and part.endswith("__")
                )
                owner = ".".join(parts[:index])
                inside = package == owner or (
                    subpackages_are_inside and package.startswith(owner + ".")
                )
                if private and not inside:
                    found.append(f"{node.lineno}: {target}")
                    break
    return found


def test_the_plugin_and_the_command_line_import_no_private_engine_module():
    src = ENGINE.parent
    offenders = {
        str(path.relative_to(src)): names
        for root in (src / "napari_medvl", ENGINE / "cli")
        for path in sorted(root.rglob("*.py"))
        if (names := _private_engine_imports(path, src))
    }
    assert offenders == {}


def test_no_engine_package_reaches_into_another_packages_private_modules():
    """What several packages share is public (``common``, ``colormaps``, ``io.limits``); a
    private module serves its own package and the packages inside it only."""
    src = ENGINE.parent
    offenders = {
        str(path.relative_to(src)): names
        for path in sorted(ENGINE.rglob("*.py"))
        if (names := _private_engine_imports(path, src, subpackages_are_inside=True))
    }
    assert offenders == {}


def test_the_private_import_check_sees_function_level_and_from_imports(tmp_path):
    module = tmp_path / "napari_medvl" / "_job.py"
    module.parent.mkdir()
    module.write_text(
        "from medvl_engine.features import extract\n"
        "import medvl_engine.features._sniff\n"
        "def f():\n"
        "    from medvl_engine.features.extract import _resize, read_patches\n"
        "    from medvl_engine import __version__\n"
    )
    assert _private_engine_imports(module, tmp_path) == [
        "2: medvl_engine.features._sniff",
        "4: medvl_engine.features.extract._resize",
    ]
    own = tmp_path / "medvl_engine" / "cli" / "cmd_x.py"
    own.parent.mkdir(parents=True)
    own.write_text("from medvl_engine.cli._pathology import x\nfrom ._pathology import y\n")
    assert _private_engine_imports(own, tmp_path) == []
