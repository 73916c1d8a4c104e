"""The import graph of both packages: no cycle between files or packages, and the layer order holds.

Every ``import`` and ``from ... import`` is read with :mod:`ast`, including imports inside
functions (they run later, but they still tie the two modules together), and a package face
built with ``lazy_exports`` counts as importing the submodules it names; only imports under
``if TYPE_CHECKING:`` are exempt, because they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGES = ("medvl_engine", "napari_medvl")

# Layer of every unit of medvl_engine (a subpackage, or a module at the package root), lowest
# first. A unit may import units of its own layer or lower ones, never a higher one.
ENGINE_LAYERS: dict[int, tuple[str, ...]] = {
    1: (
        "medvl_engine",  # the package face: __version__, MedVLError, atomic writes
        "errors",
        "common",  # atomic writes, cache, console, MEDVL_MAX_* limits, write errors, fingerprints
        "colormaps",
        "demo_models",
    ),
    2: ("io", "tiling", "guarded_files"),  # guarded_files: .h5/.pt/.npz/zarr readers' checks
    3: ("data",),
    4: ("synthetic",),
    5: ("encoders", "losses"),
    6: ("models",),
    7: ("evaluation", "features"),
    8: ("heatmap", "prompts"),
    9: ("slide_classification", "export", "model_folders", "segmentation"),
    10: ("pathology", "mammography"),  # one engine call per user action
    11: ("training",),
    12: ("tasks",),  # each paper's task, evaluation, recipe and pretraining
    13: ("demo",),
    14: ("cli",),
}
PLUGIN_LAYER = 15
VIEWER_PACKAGES = ("napari", "qtpy", "magicgui", "PyQt5", "PyQt6", "PySide2", "PySide6")


# --------------------------------------------------------------------------- the walker


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file for every ``.py`` file of ``package`` under ``root``."""
    files = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    tree: ast.AST, type_checking: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import node of ``tree`` at any depth; those under ``if TYPE_CHECKING:`` only when
    ``type_checking`` is true."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _import_nodes(node, type_checking)


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module ``from <level dots><name>`` names, seen from ``module``."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _known(name: str, modules: Iterable[str]) -> str | None:
    """``name`` or its nearest enclosing module that is one of ``modules``."""
    known = set(modules)
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def imported_names(module: str, path: Path, type_checking: bool = False) -> set[str]:
    """Every absolute name ``module`` imports; ``from X import y`` gives ``X.y``.

    ``X.y`` is a module or a name defined in module ``X``: :func:`import_graph` tells them apart.
    Imports under ``if TYPE_CHECKING:`` count only when ``type_checking`` is true.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in _import_nodes(tree, type_checking):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        source = (
            _resolve_relative(module, is_package, node.level, node.module)
            if node.level
            else node.module or ""
        )
        for alias in node.names:
            names.add(f"{source}.{alias.name}" if alias.name != "*" else source)
    names.update(f"{module}.{home}" for home in _lazy_homes(tree))
    return names


def _lazy_homes(tree: ast.AST) -> set[str]:
    """Submodules a package face imports by name on first use: the string values of the dict
    passed to ``lazy_exports(__name__, {public name: submodule})``
    (:mod:`medvl_engine.common.lazy`)."""
    homes: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "lazy_exports"
            and len(node.args) == 2
            and isinstance(node.args[1], ast.Dict)
        ):
            homes.update(
                value.value
                for value in node.args[1].values
                if isinstance(value, ast.Constant) and isinstance(value.value, str)
            )
    return homes


def import_graph(
    root: Path, packages: Iterable[str], type_checking: bool = False
) -> dict[str, set[str]]:
    """Module -> modules of ``packages`` it imports (files under ``root``; self-edges dropped).

    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``;
    ``type_checking`` counts the imports under ``if TYPE_CHECKING:`` too.
    """
    files: dict[str, Path] = {}
    for package in packages:
        files.update(module_files(root, package))
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = {_known(name, files) for name in imported_names(module, path, type_checking)}
        graph[module] = {target for target in targets if target and target != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when the graph is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of ``graph``, found by removing each in turn."""
    remaining = {node: set(targets) for node, targets in graph.items()}
    cycles = []
    while (cycle := find_cycle(remaining)) is not None:
        cycles.append(cycle)
        remaining[cycle[-2]].discard(cycle[-1])
    return cycles


def unit_of(module: str) -> str:
    """The package-level unit of a module: ``medvl_engine.<first part>``, or the package itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "medvl_engine" else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph with every module replaced by its unit (:func:`unit_of`)."""
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = units.setdefault(unit_of(module), set())
        edges.update(unit_of(target) for target in targets)
        edges.discard(unit_of(module))
    return units


def layer_of(unit: str) -> int:
    if unit == "napari_medvl":
        return PLUGIN_LAYER
    name = unit.split(".", 1)[1] if "." in unit else unit
    for layer, names in ENGINE_LAYERS.items():
        if name in names:
            return layer
    raise KeyError(f"{unit} has no layer: add it to ENGINE_LAYERS in {Path(__file__).name}")


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per edge of ``graph`` that points from a unit to a higher layer's unit."""
    return sorted(
        f"{module} (layer {layer_of(unit_of(module))}) imports {target} "
        f"(layer {layer_of(unit_of(target))})"
        for module, targets in graph.items()
        for target in targets
        if layer_of(unit_of(target)) > layer_of(unit_of(module))
    )


def _format_cycles(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


# --------------------------------------------------------------------------- the real tree


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(SRC, PACKAGES)


def test_no_import_cycle_between_files(graph):
    cycles = all_cycles(graph)
    assert not cycles, "modules that import each other (directly or round a loop):\n" + (
        _format_cycles(cycles)
    )


def test_no_file_cycle_even_through_type_checking_imports():
    """A cycle hidden behind ``if TYPE_CHECKING:`` still ties two files into one design unit."""
    cycles = all_cycles(import_graph(SRC, PACKAGES, type_checking=True))
    assert not cycles, "modules that name each other, counting type-checking imports:\n" + (
        _format_cycles(cycles)
    )


def test_no_import_cycle_between_packages(graph):
    cycles = all_cycles(package_graph(graph))
    assert not cycles, "packages that import each other (directly or round a loop):\n" + (
        _format_cycles(cycles)
    )


def test_every_engine_unit_has_a_layer_and_every_layer_entry_exists(graph):
    units = {unit_of(module) for module in graph}
    assert {unit for unit in units if not _has_layer(unit)} == set()
    listed = {f"medvl_engine.{name}" if name != "medvl_engine" else name for name in _names()}
    assert listed - units == set(), "ENGINE_LAYERS names units that no longer exist"


def _has_layer(unit: str) -> bool:
    try:
        layer_of(unit)
    except KeyError:
        return False
    return True


def test_no_module_imports_a_higher_layer(graph):
    violations = layer_violations(graph)
    assert not violations, "imports against the layer order:\n" + "\n".join(violations)


def test_engine_imports_neither_the_plugin_nor_a_viewer_toolkit():
    """Not even for type checking: the engine installs and type-checks without them."""
    engine = module_files(SRC, "medvl_engine")
    offenders = sorted(
        f"{module} imports {name}"
        for module, path in engine.items()
        for name in imported_names(module, path, type_checking=True)
        if name.split(".")[0] in ("napari_medvl", *VIEWER_PACKAGES)
    )
    assert offenders == []


# --------------------------------------------------------------------------- the walker itself


def _write_fake_package(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_walker_finds_a_cycle_through_an_import_inside_a_function(tmp_path):
    _write_fake_package(
        tmp_path,
        {
            "fake/__init__.py": "",
            "fake/a.py": "from fake import b\n",
            "fake/sub/__init__.py": "",
            "fake/b.py": "from .sub import c\n",
            "fake/sub/c.py": "def late():\n    from ..a import thing\n    return thing\n",
        },
    )
    graph = import_graph(tmp_path, ["fake"])
    assert graph["fake.a"] == {"fake.b"}
    assert graph["fake.b"] == {"fake.sub.c"}
    assert graph["fake.sub.c"] == {"fake.a"}
    assert find_cycle(graph) == ["fake.a", "fake.b", "fake.sub.c", "fake.a"]
    assert package_graph({"medvl_engine.x.a": {"medvl_engine.y"}, "medvl_engine.y": set()}) == {
        "medvl_engine.x": {"medvl_engine.y"},
        "medvl_engine.y": set(),
    }


def test_walker_follows_a_lazy_package_face_to_its_submodules(tmp_path):
    _write_fake_package(
        tmp_path,
        {
            "fake/__init__.py": "",
            "fake/_lazy.py": "def lazy_exports(package, homes): ...\n",
            "fake/face/__init__.py": (
                "from fake._lazy import lazy_exports\n"
                "__getattr__, __dir__ = lazy_exports(__name__, {'thing': 'home'})\n"
            ),
            "fake/face/home.py": "from fake.face import other\n",
        },
    )
    graph = import_graph(tmp_path, ["fake"])
    assert graph["fake.face"] == {"fake._lazy", "fake.face.home"}
    assert find_cycle(graph) == ["fake.face", "fake.face.home", "fake.face"]


def test_walker_exempts_only_type_checking_imports(tmp_path):
    _write_fake_package(
        tmp_path,
        {
            "fake/__init__.py": "",
            "fake/a.py": "from fake.b import B\n",
            "fake/b.py": (
                "import typing\n"
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from fake.a import A\n"
                "else:\n"
                "    import fake.c\n"
                "if typing.TYPE_CHECKING:\n"
                "    import fake.a\n"
                "class B: ...\n"
            ),
            "fake/c.py": "",
        },
    )
    graph = import_graph(tmp_path, ["fake"])
    assert graph["fake.b"] == {"fake.c"}
    assert find_cycle(graph) is None
    every = imported_names("fake.b", tmp_path / "fake" / "b.py", type_checking=True)
    assert {"fake.a", "fake.a.A", "fake.c"} <= every


def test_layer_check_flags_only_imports_of_a_higher_layer():
    graph = {
        "medvl_engine.data.mammo_dataset": {"medvl_engine.models.topk", "medvl_engine.io.slide"},
        "medvl_engine.models.topk": {"medvl_engine.data.patch_geometry"},
        "medvl_engine.cli.main": {"napari_medvl._widget"},
        "napari_medvl._widget": {"medvl_engine.cli.main"},
    }
    assert layer_violations(graph) == [
        "medvl_engine.cli.main (layer 14) imports napari_medvl._widget (layer 15)",
        "medvl_engine.data.mammo_dataset (layer 3) imports medvl_engine.models.topk (layer 6)",
    ]
    with pytest.raises(KeyError, match="no layer"):
        layer_of("medvl_engine.brand_new_package")


def _names() -> list[str]:
    return [name for names in ENGINE_LAYERS.values() for name in names]


def test_layer_table_names_each_unit_once():
    names = _names()
    assert len(names) == len(set(names))
    assert layer_of("medvl_engine.cli") > layer_of("medvl_engine.training")
    assert layer_of("napari_medvl") > max(ENGINE_LAYERS)
