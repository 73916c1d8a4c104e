"""Model folders are data, never code; a report filter runs only what its user chose.

Each hostile or broken folder must end in one sentence (UnsafeModelError / ModelNotFoundError)
through ``load_encoder`` and exit status 2 with one stderr line through the real CLI, and any
Python it ships must never run (it would leave a marker file behind).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from medvl_engine.cli.main import main
from medvl_engine.encoders import load_encoder, save_text_tower_folder
from medvl_engine.errors import ConfigError, ModelNotFoundError, UnsafeModelError


@pytest.fixture(scope="module")
def models(tmp_path_factory, make_tiny_clip, make_tiny_bert_tower) -> Path:
    """Pristine tiny model folders to copy from: a CLIP and a text tower paired with it."""
    root = tmp_path_factory.mktemp("pristine")
    clip = make_tiny_clip(root / "clip")
    save_text_tower_folder(root / "tower", make_tiny_bert_tower(16), str(clip))
    return root


@pytest.fixture(scope="module")
def slide(tmp_path_factory) -> Path:
    from medvl_engine.synthetic import make_synthetic_slide

    folder = tmp_path_factory.mktemp("slide")
    return make_synthetic_slide(folder / "small.tiff", seed=1, size=(512, 512)).path


def _copy(models: Path, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(models / name, tmp_path / name))


def _cli_fails_in_one_sentence(argv: list[str], capsys, phrase: str) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert phrase in lines[0] and "Traceback" not in captured.err
    return lines[0]


def _features_argv(slide: Path, model: Path, tmp_path: Path) -> list[str]:
    return ["features", str(slide), "--encoder", str(model), "--out", str(tmp_path / "out")]


def _heatmap_argv(slide: Path, model: Path, tmp_path: Path) -> list[str]:
    out = str(tmp_path / "h.png")
    return ["heatmap", str(slide), "--model", str(model), "--prompt", "tumor", "--out", out]


# -- code in a folder never runs -------------------------------------------------------------


def test_conch_v15_folder_with_code_and_auto_map_is_refused_and_never_runs_it(
    tmp_path, slide, capsys, code_marker_name, evil_code
):
    folder = tmp_path / "evil"
    folder.mkdir()
    marker = tmp_path / code_marker_name
    (folder / "modeling_evil.py").write_text(evil_code(marker))
    config = {"model_type": "conch-v1.5", "auto_map": {"AutoModel": "modeling_evil.Evil"}}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsafeModelError, match="never runs code from a model folder"):
        load_encoder(folder)
    line = _cli_fails_in_one_sentence(
        _features_argv(slide, folder, tmp_path), capsys, "never runs code"
    )
    assert "modeling_evil.py" in line
    assert not marker.exists()


@pytest.mark.parametrize("model_type", ["evil-net", "titan-like", None])
def test_folder_of_a_type_medvl_does_not_implement_that_ships_code_is_unsafe(tmp_path, model_type):
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"model_type": model_type, "auto_map": {"AutoModel": "m.Evil"}})
    )
    with pytest.raises(UnsafeModelError, match="auto_map"):
        load_encoder(folder)


def test_clip_folder_whose_tokenizer_asks_for_its_own_code_is_refused(models, tmp_path):
    folder = _copy(models, "clip", tmp_path)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["auto_map"] = {"AutoTokenizer": ["tok.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(UnsafeModelError, match="tokenizer_config.json asks to import"):
        load_encoder(folder)


def test_text_tower_whose_text_config_asks_for_code_is_refused(models, tmp_path):
    folder = _copy(models, "tower", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["auto_map"] = {"AutoModel": "evil.Model"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsafeModelError, match="never runs code"):
        load_encoder(folder)


def test_titan_snapshot_with_a_code_running_pickle_is_refused_without_running_it(
    tmp_path, write_titan_snapshot, code_marker_name
):
    folder = write_titan_snapshot(tmp_path / "TITAN")
    marker = tmp_path / "pickle-ran.txt"

    class Payload:
        def __reduce__(self):
            return (Path.write_text, (marker, "ran"))

    torch.save({"trunk.pos_embed": Payload()}, folder / "conch_v1_5_pytorch_model.bin")
    with pytest.raises(UnsafeModelError, match="holds more than tensors"):
        load_encoder(folder, model_type="conch-v1.5")
    assert not marker.exists() and not (tmp_path / code_marker_name).exists()


def test_medvl_conch_v15_folder_loads_without_its_code_and_refuses_added_code(
    tmp_path, write_conch_v15_folder, evil_code, code_marker_name
):
    folder = write_conch_v15_folder(tmp_path / "conch15")
    assert load_encoder(folder).embed_dim == 768
    (folder / "helper.py").write_text(evil_code(tmp_path / code_marker_name))
    with pytest.raises(UnsafeModelError, match=r"contains program code \(helper.py\)"):
        load_encoder(folder)
    assert not (tmp_path / code_marker_name).exists()


# -- weights ----------------------------------------------------------------------------------


def test_pickled_weights_are_refused_in_one_sentence(models, tmp_path, slide, capsys):
    from safetensors.torch import load_file

    folder = _copy(models, "clip", tmp_path)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(UnsafeModelError, match=r"only pickled weights \(pytorch_model.bin\)"):
        load_encoder(folder)
    _cli_fails_in_one_sentence(
        _heatmap_argv(slide, folder, tmp_path), capsys, "convert them to model.safetensors"
    )


def test_truncated_safetensors_is_one_sentence(models, tmp_path, slide, capsys):
    folder = _copy(models, "clip", tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelNotFoundError, match="model.safetensors is truncated or damaged"):
        load_encoder(folder)
    _cli_fails_in_one_sentence(
        _features_argv(slide, folder, tmp_path), capsys, "truncated or damaged"
    )
    tower = _copy(models, "tower", tmp_path)
    (tower / "model.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(ModelNotFoundError, match="truncated or damaged"):
        load_encoder(tower)


# -- config.json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ('{"model_type": "clip", ', "is not valid JSON"),
        ('["clip"]', "holds a JSON list where a JSON object"),
        ('{"model_type": 7}', 'has a "model_type" of 7, not a name'),
        (b"\xff\xfe\x00garbage", "is not valid JSON"),
    ],
)
def test_config_that_is_not_a_json_object_is_one_sentence(
    models, tmp_path, slide, capsys, content, phrase
):
    folder = _copy(models, "clip", tmp_path)
    path = folder / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ModelNotFoundError, match=phrase):
        load_encoder(folder)
    _cli_fails_in_one_sentence(_heatmap_argv(slide, folder, tmp_path), capsys, phrase)


def test_config_with_wrong_types_or_missing_sizes_is_one_sentence(
    models, tmp_path, slide, capsys, write_conch_v15_folder
):
    folder = _copy(models, "clip", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["vision_config"]["hidden_size"] = 64  # the saved weights are 32 wide
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match="do not fit together"):
        load_encoder(folder)
    # transformers' size-mismatch report and progress bars stay out of the CLI's stderr
    _cli_fails_in_one_sentence(
        _features_argv(slide, folder, tmp_path), capsys, "do not fit together"
    )

    tower = _copy(models, "tower", tmp_path)
    config = json.loads((tower / "config.json").read_text())
    del config["text_config"]
    (tower / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match='lacks the "text_config" section'):
        load_encoder(tower)

    config = json.loads((models / "tower" / "config.json").read_text())
    config["projection"]["out_features"] = "sixteen"
    (tower / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match='gives "out_features" as "sixteen"'):
        load_encoder(tower)

    config["projection"]["out_features"] = 16
    del config["text_config"]["hidden_size"]  # falls back to BERT's 768: weights do not fit
    (tower / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match="does not fit the model its config.json"):
        load_encoder(tower)

    conch = write_conch_v15_folder(tmp_path / "conch15")
    config = json.loads((conch / "config.json").read_text())
    del config["vision_config"]["depth"]
    (conch / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match=r'missing or impossible "vision_config" size'):
        load_encoder(conch)


# -- tokenizer --------------------------------------------------------------------------------


def test_folder_without_its_tokenizer_vocabulary_is_refused(models, tmp_path, slide, capsys):
    tower = _copy(models, "tower", tmp_path)
    for name in ("tokenizer.json", "vocab.txt"):
        (tower / name).unlink(missing_ok=True)
    with pytest.raises(ModelNotFoundError, match="has no tokenizer vocabulary"):
        load_encoder(tower)
    line = _cli_fails_in_one_sentence(
        _heatmap_argv(slide, tower, tmp_path), capsys, "no tokenizer vocabulary"
    )
    assert str(tower) in line
    assert not (tmp_path / "h.png").exists()


def test_tokenizer_with_an_empty_vocabulary_is_refused(models, tmp_path):
    tower = _copy(models, "tower", tmp_path)
    (tower / "tokenizer.json").unlink(missing_ok=True)
    (tower / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(ModelNotFoundError, match="has only 5 tokens"):
        load_encoder(tower)


def test_pristine_folders_still_load(models):
    encoder = load_encoder(models / "tower")
    texts = encoder.encode_text(["tumor", "stroma"])
    assert texts.shape == (2, 16) and not torch.allclose(texts[0], texts[1])


# -- the report filter ------------------------------------------------------------------------


def _resolve(spec: str):
    """The filter as ``medvl-train --allow-code`` resolves it (files need that consent)."""
    from medvl_engine.data.report_filter_loader import allow_code
    from medvl_engine.tasks.limit.records import report_filter

    with allow_code():
        return report_filter(spec)


@pytest.mark.parametrize("spec", ["os:system", "subprocess:run", "builtins:eval", "posix:system"])
def test_report_filter_refuses_python_itself(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="function of Python itself"):
        _resolve(spec)


def test_report_filter_refuses_other_installed_modules():
    with pytest.raises(ConfigError, match="not registered as a report filter"):
        _resolve("numpy:load")


def test_report_filter_from_the_users_own_file_runs_and_says_so(tmp_path, capsys):
    script = tmp_path / "filters.py"
    script.write_text("def shout(report: str) -> str:\n    return report.upper()\n")
    function = _resolve(f"{script}:shout")
    assert function("invasive carcinoma") == "INVASIVE CARCINOMA"
    captured = capsys.readouterr()
    assert captured.out.strip() == (f"limit: report filter: function shout from {script.resolve()}")
    assert f"medvl: running {script.resolve()} to use its function shout" in captured.err


def test_report_filter_refuses_names_imported_into_a_file_and_stdlib_files(tmp_path):
    script = tmp_path / "sneaky.py"
    script.write_text("from os import system\nfrom subprocess import run\n")
    for name in ("system", "run", "missing"):
        with pytest.raises(ConfigError, match="defines no function"):
            _resolve(f"{script}:{name}")
    import os

    with pytest.raises(ConfigError, match="file of the Python installation"):
        _resolve(f"{os.__file__}:system")
    with pytest.raises(ConfigError, match="does not exist"):
        _resolve(f"{tmp_path / 'absent.py'}:f")


def test_report_filter_from_an_entry_point(tmp_path, monkeypatch, capsys):
    import importlib.metadata

    package = tmp_path / "site" / "acme_filters.py"
    package.parent.mkdir()
    package.write_text("def clean(report):\n    return report.replace('Dr. X', '')\n")
    monkeypatch.syspath_prepend(str(package.parent))
    points = [
        importlib.metadata.EntryPoint("acme", "acme_filters:clean", "medvl.report_filters"),
        importlib.metadata.EntryPoint("shell", "os:system", "medvl.report_filters"),
    ]

    def entry_points(group=None, **kwargs):
        return [p for p in points if group == "medvl.report_filters"]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert _resolve("acme")("Seen by Dr. X: carcinoma") == "Seen by : carcinoma"
    assert "entry point acme = acme_filters:clean" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="function of Python itself"):
        _resolve("shell")
    with pytest.raises(ConfigError, match="rules, none or"):
        _resolve("llm")
    monkeypatch.delitem(sys.modules, "acme_filters", raising=False)


def test_report_filter_os_system_through_medvl_train_exits_2(tmp_path, capsys, write_feature_store):
    import numpy as np

    from medvl_engine.cli.train import main as train_main

    rows = []
    for index in range(2):
        write_feature_store(tmp_path / f"s{index}.zarr", np.ones((3, 16)), slide=f"s{index}")
        rows.append(
            {
                "slide_id": f"s{index}",
                "organ": "lung",
                "report": f"touch {tmp_path / 'shell-ran.txt'}",
                "features": f"s{index}.zarr",
                "split": "train",
            }
        )
    (tmp_path / "manifest.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    recipe = Path(__file__).resolve().parents[2] / "train" / "limit_demo.yaml"
    argv = [
        "limit",
        "--config",
        str(recipe),
        "task.data=manifest",
        f"task.manifest={tmp_path / 'manifest.jsonl'}",
        "task.report_filter=os:system",
        f"run.out_dir={tmp_path / 'run'}",
    ]
    assert train_main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "task.report_filter='os:system'" in err[0]
    assert "function of Python itself" in err[0]
    assert not (tmp_path / "shell-ran.txt").exists()


def test_conch_v1_checkpoint_that_would_run_code_is_refused(
    tmp_path, monkeypatch, install_fake_conch
):

    install_fake_conch(monkeypatch)
    marker = tmp_path / "pickle-ran.txt"

    class Payload:
        def __reduce__(self):
            return (Path.write_text, (marker, "ran"))

    folder = tmp_path / "CONCH"
    folder.mkdir()
    torch.save({"visual.weight": Payload()}, folder / "pytorch_model.bin")
    with pytest.raises(UnsafeModelError, match="holds more than tensors"):
        load_encoder(folder, model_type="conch-v1")
    assert not marker.exists()


def test_damaged_demo_model_says_to_rebuild_it(models, tmp_path, monkeypatch):
    from medvl_engine.encoders import demo as _demo

    folder = tmp_path / "shipped" / "medvl-demo"
    monkeypatch.setattr(_demo, "demo_model_dir", lambda: folder)
    shutil.copytree(models / "tower", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "medvl-demo"}))
    (folder / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ModelNotFoundError, match="damaged.*make demo-models"):
        load_encoder("medvl-demo")
    (folder / "helper.py").write_text("")
    with pytest.raises(UnsafeModelError, match="contains program code"):
        load_encoder("medvl-demo")
