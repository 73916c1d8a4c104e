"""The CLI says when a demo model made its output; stdout stays parseable."""

from __future__ import annotations

import json

import pytest

from medvl_engine.cli.main import main
from medvl_engine.demo_models import DEMO_NOTICE


@pytest.fixture(scope="module")
def slide_path(tmp_path_factory):
    from medvl_engine.synthetic import make_synthetic_slide

    folder = tmp_path_factory.mktemp("notice")
    return make_synthetic_slide(
        folder / "case.tiff", seed=5, size=(1024, 1024), classes=("tumor", "stroma")
    ).path


def test_heatmap_with_the_demo_model_says_so_on_stderr(slide_path, tmp_path, capsys):
    out = tmp_path / "h.csv"
    argv = ["heatmap", str(slide_path), "--prompt", "tumor", "--model", "medvl-demo"]
    assert main([*argv, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(out)]
    assert captured.err.splitlines()[-1] == f"medvl heatmap: medvl-demo: {DEMO_NOTICE}"


def test_classify_with_the_demo_model_keeps_json_clean(slide_path, capsys):
    argv = ["classify", str(slide_path), "--model", "medvl-demo", "--json"]
    assert main([*argv, "--classes", "tumor", "stroma"]) == 0
    captured = capsys.readouterr()
    assert [row["class"] for row in json.loads(captured.out)] != []
    assert captured.err.splitlines()[-1] == f"medvl classify: medvl-demo: {DEMO_NOTICE}"


def test_a_model_folder_without_the_flag_prints_no_notice(slide_path, tmp_path, capsys):
    from medvl_engine.cli._pathology import print_model_notice

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    print_model_notice(type("Args", (), {"command": "heatmap", "model": str(folder)})())
    assert capsys.readouterr().err == ""
    (folder / "config.json").write_text('{"synthetic_demo": true}', encoding="utf-8")
    print_model_notice(type("Args", (), {"command": "heatmap", "model": str(folder)})())
    assert capsys.readouterr().err.strip() == f"medvl heatmap: plain: {DEMO_NOTICE}"
