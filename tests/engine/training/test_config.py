"""Run/task configs: YAML sections, key=value overrides checked against field types."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from medvl_engine.errors import ConfigError
from medvl_engine.training import RunConfig, load_config


@dataclasses.dataclass
class _TaskConfig:
    negatives: int = 4
    sampler: str = "same_organ"
    tau: float = 0.07
    ks: tuple[int, ...] = (10, 100)
    lora_rank: int | None = None


def _write(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_yaml_and_overrides_are_merged_and_typed(tmp_path):
    path = _write(tmp_path, "run:\n  lr: 1.0e-5\n  epochs: 3\ntask:\n  negatives: 2\n")
    run, task = load_config(
        path,
        ["run.lr=2e-4", "epochs=5", "task.tau=1", "lora_rank=8", "ks=[1, 2]", "run.grad_clip=none"],
        _TaskConfig,
    )
    assert run.lr == pytest.approx(2e-4) and run.epochs == 5 and run.grad_clip is None
    assert task.negatives == 2 and task.tau == 1.0 and isinstance(task.tau, float)
    assert task.lora_rank == 8 and task.ks == (1, 2)
    assert run.weight_decay == RunConfig().weight_decay


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("run.epochs=two", "run.epochs must be int, got 'two'"),
        ("task.negatives=1.5", "task.negatives must be int"),
        ("run.amp=fp16", r"run.amp must be one of \['auto', 'bf16', 'off'\]"),
        ("run.nonsense=1", "run has no setting 'nonsense'"),
        ("wat=1", "'wat' is found in no section"),
        ("lr", "is not key=value"),
        ("model.lr=1", "unknown section 'model'"),
        ("run.progress=3", "run.progress must be bool"),
        ("run.epochs=-1", "run.epochs must be at least 0"),
        ("run.seeds=[0,0]", "run.seeds must list distinct seeds"),
        ("run.seeds=[]", "run.seeds must list distinct seeds"),
        ("run.seeds=[0,a]", r"run.seeds must be list\[int\] \| None, got \[0, 'a'\]"),
    ],
)
def test_bad_overrides_raise_config_error_naming_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override], _TaskConfig)


def test_bare_key_in_both_sections_is_ambiguous():
    @dataclasses.dataclass
    class WithSeed:
        seed: int = 1

    with pytest.raises(ConfigError, match="several sections"):
        load_config(None, ["seed=3"], WithSeed)


def test_unknown_yaml_keys_and_sections_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown task setting\(s\) \['negative'\]"):
        load_config(_write(tmp_path, "task:\n  negative: 3\n"), [], _TaskConfig)
    with pytest.raises(ConfigError, match="unknown section"):
        load_config(_write(tmp_path, "optim:\n  lr: 1\n"), [], _TaskConfig)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml", [], _TaskConfig)
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "run: [unclosed\n"), [], _TaskConfig)


@pytest.mark.parametrize(
    "config", sorted(path.name for path in (Path(__file__).parents[3] / "train").glob("*.yaml"))
)
def test_every_shipped_config_loads_with_its_task_settings(config):
    from medvl_engine.training.registry import task_module, task_names

    task = next(name for name in task_names() if config.startswith(f"{name}_"))
    path = Path(__file__).parents[3] / "train" / config
    run, settings = load_config(path, [], task_module(task).CONFIG_CLASS)
    assert isinstance(run, RunConfig) and run.out_dir
    assert dataclasses.is_dataclass(settings)
