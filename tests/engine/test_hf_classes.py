"""transformers classes are resolved in one thread at a time: two models loading at once (two
docks) both load, quietly."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "src" / "medvl_engine"

CONCURRENT_LOADS = """
import threading

errors = []

def run(action):
    try:
        action()
    except Exception as error:
        errors.append(repr(error))

def text_encoder():
    from medvl_engine.encoders import load_encoder
    load_encoder("medvl-demo")

def topk_model():
    from medvl_engine.models.topksiglip_folder import load_topksiglip
    load_topksiglip("topksiglip-demo")

def encoder_names():
    import medvl_engine.encoders  # noqa: F401

actions = (text_encoder, topk_model, encoder_names)
threads = [threading.Thread(target=run, args=(action,)) for action in actions]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("errors:", errors)
"""


ONLY_ASKED_FOR = (
    "import sys\n"
    "import medvl_engine.common.hf_classes\n"
    "print('transformers' in sys.modules)\n"
    "from medvl_engine.common.hf_classes import ConvNextModel\n"
    "print(ConvNextModel.__name__)\n"
    "names = [m.split('.') for m in sys.modules]\n"
    "print(sorted(n[2] for n in names if len(n) == 4 and n[:2] == ['transformers', 'models']\n"
    "             and n[3] == 'modeling_' + n[2]))\n"
)


@pytest.fixture(scope="module")
def fresh_processes(run_in_background) -> dict:
    """The two fresh processes of this module's tests, started together: name -> future."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    options = dict(capture_output=True, text=True, timeout=300)
    return {
        "concurrent": run_in_background(
            [sys.executable, "-c", CONCURRENT_LOADS], env=env, **options
        ),
        "only_asked_for": run_in_background([sys.executable, "-c", ONLY_ASKED_FOR], **options),
    }


def test_two_models_load_at_once_in_a_fresh_process(fresh_processes):
    done = fresh_processes["concurrent"].result()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "errors: []", done.stdout + done.stderr
    assert "LOAD REPORT" not in done.stdout + done.stderr
    assert "Loading weights" not in done.stderr


def _runtime_transformers_imports(tree: ast.Module) -> list[int]:
    """Line numbers of imports from transformers that run (not under ``if TYPE_CHECKING``)."""
    type_checking = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            type_checking.update(id(child) for child in ast.walk(node))
    lines = []
    for node in ast.walk(tree):
        if id(node) in type_checking:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            lines.append(node.lineno)
        if isinstance(node, ast.Import) and any(
            alias.name.split(".")[0] == "transformers" for alias in node.names
        ):
            lines.append(node.lineno)
    return lines


def test_the_engine_imports_transformers_classes_from_one_module():
    offenders = []
    for path in sorted(ENGINE.rglob("*.py")):
        if path.name == "_hf_classes.py":
            continue
        lines = _runtime_transformers_imports(ast.parse(path.read_text(encoding="utf-8")))
        offenders += [f"{path.relative_to(ENGINE)}:{line}" for line in lines]
    assert offenders == [], f"import these from medvl_engine.common.hf_classes: {offenders}"


def test_only_the_classes_asked_for_are_imported(fresh_processes):
    """Importing the module imports no transformers; asking for ConvNextModel imports the
    ConvNeXt family's modelling code and not BERT's or CLIP's (each costs tenths of a second)."""
    done = fresh_processes["only_asked_for"].result()
    assert done.returncode == 0, done.stderr
    imported, name, families = done.stdout.split("\n")[:3]
    assert (imported, name) == ("False", "ConvNextModel"), done.stdout
    assert "'convnext'" in families, families
    assert "'bert'" not in families and "'clip'" not in families, families
