"""`medvl-train` on hostile or careless configs: one sentence, exit 2, nothing made (issue 26).

Each case goes through the real entry point ``medvl_engine.cli.train.main``; the run folder
must not exist afterwards (nothing was created before the refusal).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from medvl_engine.cli.train import main

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "train" / "topksiglip_tiny.yaml"
LIMIT = REPO / "train" / "limit_demo.yaml"


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run medvl-train, assert exit 2 and one line on stderr; return that line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.strip()]
    assert len(err) == 1, captured.err
    assert "Traceback" not in captured.err
    return err[0]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("task.batch_size=0", ["task.batch_size must be between 1 and 65,536", "got 0"]),
        ("task.batch_size=-4", ["task.batch_size must be between 1 and 65,536", "got -4"]),
        ("task.low_res_factor=0", ["task.low_res_factor must be between 1 and 64", "got 0"]),
        ("run.lr=nan", ["run.lr must be a finite number", "got nan"]),
        ("run.lr=inf", ["run.lr must be a finite number", "got inf"]),
        ("run.lr=-1e-3", ["run.lr must be in (0, 10]", "got -0.001"]),
        ("run.seed=-1", ["run.seed must be between 0 and 4,294,967,295", "got -1"]),
        ("task.k=0", ["task.k must be between 1 and 65,536", "got 0"]),
        ("task.k=65", ["task.k=65 exceeds the 8x8 grid", "between 1 and 64"]),
        ("task.image_size=0", ["task.image_size must be between 32 and 16,384", "got 0"]),
        ("task.image_size=100000", ["task.image_size must be between 32 and 16,384"]),
        ("task.vision_depths=[]", ["task.vision_depths=[] needs 2 items"]),
        ("task.vision_depths=[1,0,1,1]", ["task.vision_depths=[1, 0, 1, 1]: item 1 (0)"]),
        ("run.max_steps=-5", ["run.max_steps must be between 0 and 1,000,000,000", "got -5"]),
        ("task.embed_dim=0", ["task.embed_dim must be between 1 and 65,536", "got 0"]),
        ("run.epochs=-1", ["run.epochs must be at least 0", "got -1"]),
        ("run.grad_accum=0", ["run.grad_accum must be between 1 and 65,536"]),
        ("task.synthetic_size=[0,10]", ["task.synthetic_size=[0, 10]: item 0 (0)"]),
        ("task.eval_k_sweep=[-1]", ["task.eval_k_sweep=[-1]: item 0 (-1)"]),
        ("run.device=cuda:abc", ["run.device='cuda:abc' is not a device name"]),
        ("task.synthetic_size=[100,100]", ["[100, 100] is smaller than the 128 x 96 px"]),
        (
            "task.text_config={hidden_size: 30, num_attention_heads: 4}",
            ['"text_config.num_attention_heads" as 4, which does not divide the hidden size 30'],
        ),
        ("task.text_config={hidden_size: big}", ["\"text_config.hidden_size\" as 'big'"]),
        (
            "task.text_config={hidden_size: 1048576}",
            ['the task section gives "text_config.hidden_size" as 1048576', "1 and 65,536"],
        ),
    ],
)
def test_out_of_range_values_are_one_sentence_naming_key_value_and_range(
    override, expected, tmp_path, capsys
):
    out = tmp_path / "run"
    line = _refused(capsys, ["topksiglip", "--config", str(TINY), override, f"run.out_dir={out}"])
    for words in expected:
        assert words in line, line
    assert not out.exists()


def test_the_none_sentinel_of_max_steps_is_accepted():
    from medvl_engine.training import load_config, task_module

    run, _ = load_config(TINY, ["run.max_steps=none"], task_module("topksiglip").CONFIG_CLASS)
    assert run.max_steps is None


@pytest.mark.parametrize("target", ["/dev/null", "file"])
def test_out_dir_that_is_a_file_or_device_is_refused(target, tmp_path, capsys):
    if target == "file":
        target_path = tmp_path / "notes.txt"
        target_path.write_text("keep me")
        target = str(target_path)
    line = _refused(capsys, ["topksiglip", "--config", str(TINY), f"run.out_dir={target}"])
    assert f"run.out_dir='{target}'" in line
    assert "not a folder" in line or "devices" in line
    if target.endswith("notes.txt"):
        assert Path(target).read_text() == "keep me"


@pytest.mark.parametrize(("task", "recipe"), [("topksiglip", TINY), ("limit", LIMIT)])
def test_synthetic_dir_on_a_device_is_refused(task, recipe, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [task, "--config", str(recipe), "task.synthetic_dir=/dev/null", f"run.out_dir={out}"]
    line = _refused(capsys, argv)
    assert "task.synthetic_dir='/dev/null' lies under /dev" in line
    assert not out.exists()


def test_out_dir_under_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    out = tmp_path / "plain" / "run"
    line = _refused(capsys, ["topksiglip", "--config", str(TINY), f"run.out_dir={out}"])
    assert "cannot be created because" in line and "is a file" in line


def test_synthetic_cohort_over_the_budget_is_refused_at_once(tmp_path, capsys):
    out = tmp_path / "run"
    line = _refused(
        capsys,
        [
            "topksiglip",
            "--config",
            str(TINY),
            "task.synthetic_train=1000000000",
            f"run.out_dir={out}",
        ],
    )
    assert "task.synthetic_train must be between 0 and 10,000,000" in line
    line = _refused(
        capsys,
        [
            "topksiglip",
            "--config",
            str(TINY),
            "task.synthetic_train=9000000",
            f"run.out_dir={out}",
        ],
    )
    assert "synthetic breasts" in line and "MEDVL_MAX_SYNTHETIC_PIXELS" in line
    assert not out.exists()


def test_synthetic_budget_follows_its_environment_override(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEDVL_MAX_SYNTHETIC_PIXELS", "1000")
    out = tmp_path / "run"
    line = _refused(capsys, ["topksiglip", "--config", str(TINY), f"run.out_dir={out}"])
    assert "16 synthetic breasts of 192x128 px" in line


def test_config_that_is_a_program_is_refused(capsys):
    line = _refused(capsys, ["topksiglip", "--config", "/bin/ls"])
    assert line.endswith(
        "config file /bin/ls is not a text file (it holds binary data); pass a YAML recipe "
        "such as train/limit_demo.yaml."
    )


def test_config_that_is_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    line = _refused(capsys, ["topksiglip", "--config", str(fifo)])
    assert f"config file {fifo} is a named pipe (FIFO), not a YAML file" in line


def test_config_that_is_a_folder_is_refused(tmp_path, capsys):
    line = _refused(capsys, ["topksiglip", "--config", str(tmp_path)])
    assert "is a folder, not a YAML file" in line


def test_config_over_the_size_cap_is_refused_without_reading_it(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as handle:  # sparse: 2 MB of holes, written in no time
        handle.truncate(2 * 1024 * 1024)
    line = _refused(capsys, ["topksiglip", "--config", str(big)])
    assert "2,097,152 bytes, more than the 1,048,576 a config may take" in line


def test_deeply_nested_yaml_is_one_sentence(tmp_path, capsys):
    deep = tmp_path / "deep.yaml"
    deep.write_text("run: " + "[" * 5000 + "]" * 5000 + "\n")
    line = _refused(capsys, ["topksiglip", "--config", str(deep)])
    assert f"config file {deep} is nested more than 32 levels deep" in line


def test_deeply_nested_override_is_one_sentence(capsys):
    line = _refused(
        capsys, ["topksiglip", "--config", str(TINY), "task.eval_k_sweep=" + "[" * 3000]
    )
    assert "override task.eval_k_sweep is nested more than 32 levels deep" in line


def test_yaml_aliases_are_refused(tmp_path, capsys):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "run:\n  seeds: *b\n"
    )
    line = _refused(capsys, ["topksiglip", "--config", str(bomb)])
    assert "uses a YAML alias" in line


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("- run\n- task\n", "holds a YAML list, but a config must be a mapping"),
        ("just words\n", "holds a YAML str, but a config must be a mapping"),
        ("run: 5\n", "the run section must be a mapping of settings"),
        ("run:\n  1: 2\n", "run setting names must be words"),
        ("run:\n  lr: 1" + "0" * 5000 + "\n", "is not valid YAML"),
    ],
)
def test_malformed_yaml_shapes_are_one_sentence(text, words, tmp_path, capsys):
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    line = _refused(capsys, ["topksiglip", "--config", str(path)])
    assert words in line, line


def test_hostile_config_in_a_child_process_answers_quickly(tmp_path, run_limited):
    """A 1 GB sparse YAML and a FIFO: refused in seconds, in little memory (was a hang)."""
    big = tmp_path / "huge.yaml"
    with open(big, "wb") as handle:
        handle.truncate(1024**3)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    code = (
        "from medvl_engine.cli.train import main\n"
        f"for config in ({str(big)!r}, {str(fifo)!r}):\n"
        "    print('exit', main(['topksiglip', '--config', config]), flush=True)\n"
    )
    returncode, stdout, stderr, peak = run_limited(code, timeout_s=60, max_mb=1024)
    assert returncode == 0 and stdout.split() == ["exit", "2", "exit", "2"], stderr
    assert str(big) in stderr and str(fifo) in stderr and "killed" not in stderr
    assert peak < 1024


# -- code named by a config runs only with --allow-code ------------------------------------


def _limit_manifest(tmp_path: Path, write_feature_store) -> Path:
    import json

    import numpy as np

    rows = []
    for index in range(2):
        write_feature_store(tmp_path / f"s{index}.zarr", np.ones((3, 16)), slide=f"s{index}")
        rows.append(
            {
                "slide_id": f"s{index}",
                "organ": "lung",
                "report": "invasive carcinoma",
                "features": f"s{index}.zarr",
                "split": "train",
            }
        )
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("\n".join(json.dumps(row) for row in rows))
    return manifest


def _marking_filter(tmp_path: Path, module: str) -> tuple[Path, Path]:
    """``tmp_path/<module>.py`` defining the report filter ``clean`` (reports unchanged); running
    the file writes "ran" to the marker file. Returns (the script, the marker)."""
    marker = tmp_path / "filter-ran.txt"
    script = tmp_path / f"{module}.py"
    script.write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "def clean(report: str) -> str:\n    return report\n"
    )
    return script, marker


def test_report_filter_file_from_a_config_needs_allow_code(tmp_path, capsys, write_feature_store):
    script, marker = _marking_filter(tmp_path, "colleague_filters")
    manifest = _limit_manifest(tmp_path, write_feature_store)
    recipe = tmp_path / "shared.yaml"
    recipe.write_text(
        "run:\n  epochs: 0\n  progress: false\n  device: cpu\n"
        f"  out_dir: {tmp_path / 'run'}\n"
        "task:\n  data: manifest\n"
        f"  manifest: {manifest}\n"
        f"  report_filter: {script}:clean\n"
    )
    line = _refused(capsys, ["limit", "--config", str(recipe)])
    assert f"task.report_filter='{script}:clean' asks to run the function 'clean'" in line
    assert str(script) in line and "--allow-code" in line
    assert not marker.exists()
    assert not (tmp_path / "run").exists()


def test_report_filter_file_runs_with_allow_code_and_is_announced_first(
    tmp_path, capsys, monkeypatch
):
    from medvl_engine.data.report_filter_loader import allow_code, resolve_report_filter

    script = tmp_path / "filters.py"
    script.write_text(
        "import sys\nprint('FILE-RAN', file=sys.stderr)\n"
        "def shout(report: str) -> str:\n    return report.upper()\n"
    )
    with allow_code():
        resolved = resolve_report_filter(f"{script}:shout")
    assert resolved.function is not None and resolved.function("ok") == "OK"
    err = capsys.readouterr().err.splitlines()
    announced = f"medvl: running {script.resolve()} to use its function shout as task.report_filter"
    assert err[0].startswith(announced) and "--allow-code" in err[0]
    assert err[1] == "FILE-RAN"  # the announcement came before the file ran
    monkeypatch.delitem(sys.modules, "filters", raising=False)


def test_allow_code_lets_the_shared_config_run_its_filter(tmp_path, capsys, write_feature_store):
    script, marker = _marking_filter(tmp_path, "consented_filters")
    manifest = _limit_manifest(tmp_path, write_feature_store)
    argv = [
        "limit",
        "--config",
        str(LIMIT),
        "--allow-code",
        "task.data=manifest",
        f"task.manifest={manifest}",
        f"task.report_filter={script}:clean",
        "run.epochs=0",
        f"run.out_dir={tmp_path / 'run'}",
    ]
    main(argv)  # the run itself may stop later (toy features); the filter ran, announced
    assert marker.read_text() == "ran"
    err = capsys.readouterr().err
    assert f"medvl: running {script.resolve()} to use its function clean" in err
    sys.modules.pop("consented_filters", None)


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo"])
def test_a_resume_checkpoint_that_cannot_be_read_is_refused_on_load(kind, tmp_path, capsys):
    target = tmp_path / "checkpoint.pt"
    if kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    out = tmp_path / "run"
    argv = ["topksiglip", "--config", str(TINY), f"run.out_dir={out}", f"run.resume={target}"]
    line = _refused(capsys, argv)
    assert f"run.resume='{target}'" in line and "give the checkpoint.pt of an earlier run" in line
    assert not out.exists()


@pytest.mark.parametrize(("task", "recipe"), [("topksiglip", TINY), ("limit", LIMIT)])
@pytest.mark.parametrize("kind", ["missing", "fifo"])
def test_a_manifest_that_cannot_be_read_is_refused_on_load(task, recipe, kind, tmp_path, capsys):
    manifest = tmp_path / "manifest.csv"
    if kind == "fifo":
        os.mkfifo(manifest)
    out = tmp_path / "run"
    argv = [task, "--config", str(recipe), f"run.out_dir={out}", f"task.manifest={manifest}"]
    if task == "limit":
        argv.append("task.data=manifest")
    line = _refused(capsys, argv)
    assert f"task.manifest='{manifest}'" in line and "manifest (CSV/JSONL)" in line
    assert not out.exists()
