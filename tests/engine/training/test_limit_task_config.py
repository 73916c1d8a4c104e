"""The LIMIT task config written by sections (model, loss, data, eval) or flat, as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import medvl_engine.tasks.limit as limit_package
from medvl_engine.errors import ConfigError
from medvl_engine.tasks.limit.config import LimitTaskConfig
from medvl_engine.tasks.limit.task import CONFIG_CLASS
from medvl_engine.training.config import config_values, load_config, section_fields

# the shipped recipes: package data beside the task, and (or) train/ of the checkout
RECIPES = {
    path.name: path
    for folder in (
        Path(__file__).resolve().parents[3] / "train",
        Path(limit_package.__file__).parent / "recipes",
    )
    for path in sorted(folder.glob("limit_*.yaml"))
}

FLAT = """\
task:
  data: synthetic
  synthetic_slides: 40
  num_negatives: 2
  text_model: medvl-demo
  tau_attn: 0.1
  finetune: lora
  loss: infonce
  tau_nce: 0.05
  eval_topk: 5
  eval_robustness: false
"""

SECTIONED = """\
task:
  data:
    data: synthetic
    synthetic_slides: 40
    num_negatives: 2
  model:
    text_model: medvl-demo
    tau_attn: 0.1
    finetune: lora
  loss:
    loss: infonce
    tau_nce: 0.05
  eval:
    eval_topk: 5
    eval_robustness: false
"""

MIXED = """\
task:
  data: synthetic
  synthetic_slides: 40
  num_negatives: 2
  model: {text_model: medvl-demo, tau_attn: 0.1, finetune: lora}
  loss: infonce
  tau_nce: 0.05
  eval: {eval_topk: 5, eval_robustness: false}
"""


def _load(tmp_path: Path, text: str, overrides: list[str] | None = None) -> LimitTaskConfig:
    path = tmp_path / "limit.yaml"
    path.write_text(text)
    _, config = load_config(path, overrides or [], LimitTaskConfig)
    return config


def test_every_field_is_in_exactly_one_of_the_four_sections():
    sections = section_fields(CONFIG_CLASS)  # TypeError on a field in none or in two
    assert list(sections) == ["data", "model", "loss", "eval"]
    names = [name for members in sections.values() for name in members]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(LimitTaskConfig))
    assert all(name.startswith("eval_") for name in sections["eval"])


def test_sectioned_flat_and_mixed_yaml_give_the_same_config(tmp_path):
    flat = _load(tmp_path, FLAT)
    assert flat.data == "synthetic" and flat.loss == "infonce" and flat.tau_nce == 0.05
    assert flat.tau_attn == 0.1 and flat.finetune == "lora" and flat.eval_topk == 5
    assert _load(tmp_path, SECTIONED) == flat
    assert _load(tmp_path, MIXED) == flat
    saved = config_values(flat)
    assert saved["loss"] == {"loss": "infonce", "tau_nce": 0.05}
    assert saved["data"]["data"] == "synthetic" and saved["model"]["tau_attn"] == 0.1


def test_overrides_may_name_the_section(tmp_path):
    config = _load(tmp_path, SECTIONED, ["task.loss.tau_nce=0.2", "task.eval_topk=7"])
    assert config.tau_nce == 0.2 and config.eval_topk == 7
    with pytest.raises(ConfigError, match="has no setting"):
        _load(tmp_path, SECTIONED, ["task.loss.tau_attn=0.2"])


def test_a_setting_twice_or_in_the_wrong_section_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="given twice"):
        _load(tmp_path, SECTIONED + "  tau_nce: 0.1\n")
    with pytest.raises(ConfigError, match="belongs in task.model"):
        _load(tmp_path, "task:\n  loss:\n    tau_attn: 0.1\n")
    with pytest.raises(ConfigError, match="tau_nce"):
        _load(tmp_path, "task:\n  loss:\n    tau_nce: -1\n")  # ranges still apply


def test_the_shipped_flat_recipes_load_as_before():
    assert {"limit_demo.yaml", "limit_conchz.yaml"} <= set(RECIPES)
    for recipe in RECIPES.values():
        _, config = load_config(recipe, [], LimitTaskConfig)
        assert isinstance(config, LimitTaskConfig)
