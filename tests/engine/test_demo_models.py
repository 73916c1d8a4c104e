"""The shipped demo models' package API: where they live and which models carry the notice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medvl_engine import demo_models
from medvl_engine.demo_models import (
    DEMO_NOTICE,
    SHIPPED_ROOT,
    demo_notice_for,
    shipped_model_dir,
)
from medvl_engine.tasks.demo_models import main as rebuild_main
from medvl_engine.tasks.demo_models import rebuild_function


def _folder(tmp_path: Path, name: str, config: object) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    text = config if isinstance(config, str) else json.dumps(config)
    (folder / "config.json").write_text(text, encoding="utf-8")
    return folder


def test_notice_text_is_the_contract_sentence() -> None:
    assert DEMO_NOTICE == "demo model trained on synthetic data, not for diagnosis"


def test_shipped_root_is_the_package_folder() -> None:
    assert SHIPPED_ROOT == Path(demo_models.__file__).resolve().parent
    assert (SHIPPED_ROOT / "__init__.py").is_file()


@pytest.mark.parametrize("name", ["medvl-demo", "topksiglip-demo"])
def test_demo_names_carry_the_notice(name: str) -> None:
    assert demo_notice_for(name) == DEMO_NOTICE


@pytest.mark.parametrize("model", [None, "", "plip", "conch", "medvl-demo-extra", "/no/such"])
def test_other_names_carry_no_notice(model: str | None) -> None:
    assert demo_notice_for(model) is None


def test_folder_flagged_synthetic_demo_carries_the_notice(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "my-demo", {"model_type": "x", "synthetic_demo": True})
    assert demo_notice_for(folder) == DEMO_NOTICE
    assert demo_notice_for(str(folder)) == DEMO_NOTICE


@pytest.mark.parametrize(
    "config",
    [{"model_type": "x"}, {"synthetic_demo": False}, {"synthetic_demo": "true"}, [1, 2], "{broken"],
)
def test_folder_without_the_flag_carries_no_notice(tmp_path: Path, config: object) -> None:
    assert demo_notice_for(_folder(tmp_path, "model", config)) is None


def test_notice_follows_a_config_rewritten_in_place(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "model", {"synthetic_demo": True})
    assert demo_notice_for(folder) == DEMO_NOTICE
    config = folder / "config.json"
    config.write_text(json.dumps({"synthetic_demo": False, "pad": "x" * 10}), encoding="utf-8")
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    assert demo_notice_for(folder) is None


def test_shipped_model_dir_only_for_folders_with_a_config(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(demo_models, "SHIPPED_ROOT", tmp_path)
    assert shipped_model_dir("medvl-demo") is None
    _folder(tmp_path, "medvl-demo", {"synthetic_demo": True})
    (tmp_path / "topksiglip-demo").mkdir()
    assert shipped_model_dir("medvl-demo") == tmp_path / "medvl-demo"
    assert shipped_model_dir("topksiglip-demo") is None
    assert shipped_model_dir("plip") is None
    assert shipped_model_dir("../medvl-demo") is None


def test_shipped_folders_that_exist_are_flagged_demo() -> None:
    for name in ("medvl-demo", "topksiglip-demo"):
        folder = shipped_model_dir(name)
        if folder is not None:
            assert demo_notice_for(folder) == DEMO_NOTICE, f"{folder} lacks synthetic_demo"


def test_rebuild_dispatch_names_a_missing_recipe(monkeypatch, capsys) -> None:
    from medvl_engine.tasks import demo_models as entry

    monkeypatch.setitem(entry._REBUILDERS, "medvl-demo", "medvl_engine.no_such_module")
    assert rebuild_main(["medvl-demo"]) == 2
    err = capsys.readouterr().err
    assert "cannot rebuild medvl-demo" in err and "no_such_module" in err
    assert "Traceback" not in err


def test_rebuild_dispatch_calls_each_recipe_with_progress(monkeypatch, capsys, tmp_path) -> None:
    import types

    from medvl_engine.tasks import demo_models as entry

    calls = []

    def make(name: str) -> types.ModuleType:
        module = types.ModuleType(f"fake_{name}")

        def rebuild_shipped(progress=None) -> Path:
            progress(f"building {name}")
            calls.append(name)
            return tmp_path / name

        module.rebuild_shipped = rebuild_shipped
        return module

    for name in ("medvl-demo", "topksiglip-demo"):
        module = make(name)
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setitem(entry._REBUILDERS, name, module.__name__)
    assert rebuild_main(["all"]) == 0
    assert calls == ["medvl-demo", "topksiglip-demo"]
    out = capsys.readouterr().out
    assert "[medvl-demo] building medvl-demo" in out
    assert f"topksiglip-demo: wrote {tmp_path / 'topksiglip-demo'}" in out
    assert callable(rebuild_function("medvl-demo"))


def test_module_entry_point_rejects_an_unknown_name() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "medvl_engine.tasks.demo_models", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def _rebuild_code(out: Path, verbose: bool) -> str:
    return (
        "import sys, types\n"
        "from pathlib import Path\n"
        "from medvl_engine.tasks import demo_models as entry\n"
        "module = types.ModuleType('fake_recipe')\n"
        "def rebuild_shipped(progress=None):\n"
        "    from medvl_engine.models._bert_text import MINILM, build_bert_model\n"
        "    build_bert_model(MINILM, {})\n"
        f"    return Path({str(out)!r})\n"
        "module.rebuild_shipped = rebuild_shipped\n"
        "sys.modules['fake_recipe'] = module\n"
        "entry._REBUILDERS['topksiglip-demo'] = 'fake_recipe'\n"
        f"sys.exit(entry.main(['topksiglip-demo'{', ' + repr('--verbose') if verbose else ''}]))\n"
    )


REBUILD_TEST = "test_rebuild_loads_the_text_tower_quietly_unless_verbose"


@pytest.fixture(scope="module")
def rebuilds(tmp_path_factory, run_in_background, selected_params, library_output_env, request):
    """``rebuilds(verbose)`` -> (the finished fresh process that rebuilt with a stand-in recipe
    loading the MiniLM tower, transformers' output settings at their defaults; its folder).
    The first call starts the processes of every selected case together (two at a time)."""
    env = library_output_env()
    started: dict[bool, tuple] = {}

    def result(verbose: bool) -> tuple[subprocess.CompletedProcess, Path]:
        for case in [verbose, *selected_params(request, REBUILD_TEST, "verbose")]:
            if case not in started:
                out = tmp_path_factory.mktemp("rebuilt")
                command = [sys.executable, "-c", _rebuild_code(out, case)]
                options = dict(capture_output=True, text=True, env=env, timeout=300)
                started[case] = (run_in_background(command, **options), out)
        future, out = started[verbose]
        return future.result(), out

    return result


@pytest.mark.parametrize("verbose", [False, True])
def test_rebuild_loads_the_text_tower_quietly_unless_verbose(verbose: bool, rebuilds) -> None:
    completed, out = rebuilds(verbose)
    assert completed.returncode == 0, completed.stderr
    assert f"topksiglip-demo: wrote {out}" in completed.stdout
    assert ("LOAD REPORT" in completed.stderr) == verbose, completed.stderr
