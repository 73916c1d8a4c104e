"""Loading a model prints no third-party noise: no transformers load report, no "Loading weights"
bars, on `medvl-train` (which loads the pretrained MiniLM text tower) and in a command session
where transformers was imported before it began; `--verbose` lets them through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAIN = Path(sys.executable).with_name("medvl-train")
NOISE = ("LOAD REPORT", "Loading weights", "UNEXPECTED", "[transformers]", "Warning")


def _train_argv(tmp_path: Path, *flags: str) -> list[str]:
    tiny = [  # the demo recipe with its MiniLM text tower, cut to 4 images per split, no step
        "task.synthetic_train=4",
        "task.synthetic_eval=4",
        "task.synthetic_test=4",
        "task.synthetic_size=[192,128]",
        "task.lesion_pretrain_steps=0",  # every step count of the recipe is set: no training
        "task.scorer_pretrain_steps=0",
        "task.probe_steps=1",
        "task.batch_size=2",
        "task.image_size=128",
        "task.grid=4",
        "run.epochs=0",
        f"run.out_dir={tmp_path / 'run'}",
        f"task.synthetic_dir={tmp_path / 'synthetic'}",
    ]
    config = ROOT / "train" / "topksiglip_demo.yaml"
    return [str(TRAIN), *flags, "topksiglip", "--config", str(config), *tiny]


SESSION_CODE = (
    "import transformers\n"
    "from medvl_engine.common.console import command_session\n"
    "from medvl_engine.models._bert_text import build_bert_model\n"
    "with command_session():\n"
    "    build_bert_model('all-MiniLM-L6-v2', {})\n"
    "build_bert_model('all-MiniLM-L6-v2', {})  # outside the session: noise comes back\n"
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, run_in_background, library_output_env) -> dict:
    """The fresh processes of this module's tests, started together (two at a time): name ->
    future of their CompletedProcess."""
    futures = {}
    options = dict(capture_output=True, text=True, timeout=600)
    if TRAIN.exists():
        for name, flags in (("quiet", ()), ("verbose", ("--verbose",))):
            folder = tmp_path_factory.mktemp(f"train-{name}")
            env = library_output_env(MEDVL_CACHE=str(folder / "cache"))
            futures[name] = run_in_background(_train_argv(folder, *flags), env=env, **options)
    command = [sys.executable, "-c", SESSION_CODE]
    futures["session"] = run_in_background(command, env=library_output_env(), **options)
    return futures


def _train(runs: dict, name: str) -> subprocess.CompletedProcess:
    if name not in runs:
        pytest.skip(f"the medvl-train command is not installed beside {sys.executable}")
    return runs[name].result()


def test_medvl_train_loads_the_text_tower_without_library_noise(runs):
    completed = _train(runs, "quiet")
    assert completed.returncode == 0, completed.stderr
    for word in NOISE:
        assert word not in completed.stderr, completed.stderr
    # what remains on stderr is medvl's own progress bar
    lines = [line for line in completed.stderr.replace("\r", "\n").splitlines() if line.strip()]
    assert all(line.startswith("train topksiglip:") for line in lines), lines


def test_verbose_lets_the_load_report_through(runs):
    completed = _train(runs, "verbose")
    assert completed.returncode == 0, completed.stderr
    assert "LOAD REPORT" in completed.stderr


def test_session_quiet_when_transformers_was_imported_before_it(runs):
    completed = runs["session"].result()
    assert completed.returncode == 0, completed.stderr
    # exactly one report and one bar: those of the load outside the session
    assert completed.stderr.count("LOAD REPORT") == 1
    assert completed.stderr.count("Loading weights: 100%") == 1
