"""Task configs by sections: YAML by sections or flat, overrides with or without the section,
the saved form grouped, and every shipped recipe and model folder loading as before."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import yaml

from medvl_engine.errors import ConfigError
from medvl_engine.training import RunConfig, load_config
from medvl_engine.training.config import (
    config_from_mapping,
    config_values,
    flatten_sections,
    section_fields,
)
from medvl_engine.training.registry import task_module, task_names, task_recipes

REPO = Path(__file__).resolve().parents[3]
TRAIN = REPO / "train"


@dataclasses.dataclass
class _ModelPart:
    width: int = 8
    depth: int = 2


@dataclasses.dataclass
class _Sectioned(_ModelPart):
    loss: Literal["a", "b"] = "a"  # a field named like its section (as LIMIT's)
    tau: float = 0.07
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0

    SECTIONS: ClassVar[dict[str, Any]] = {
        "model": _ModelPart,
        "loss": ("loss", "tau"),
        "train": ("options", "seed"),
    }


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_yaml_by_sections_flat_or_mixed_gives_the_same_config(tmp_path):
    by_sections = "task:\n  model:\n    width: 16\n  loss:\n    loss: b\n    tau: 0.1\n"
    flat = "task:\n  width: 16\n  loss: b\n  tau: 0.1\n"
    mixed = "task:\n  model: {width: 16}\n  loss: b\n  tau: 0.1\n"
    configs = [
        load_config(_write(tmp_path, text), [], _Sectioned)[1]
        for text in (by_sections, flat, mixed)
    ]
    assert configs[0] == configs[1] == configs[2] == _Sectioned(width=16, loss="b", tau=0.1)


def test_overrides_name_a_field_with_or_without_its_section(tmp_path):
    path = _write(tmp_path, "task:\n  model:\n    width: 16\n")
    _, task = load_config(
        path, ["task.model.width=4", "task.depth=3", "tau=0.5", "task.loss=b"], _Sectioned
    )
    assert (task.width, task.depth, task.tau, task.loss) == (4, 3, 0.5, "b")
    _, task = load_config(path, ["task.loss.loss=b", "task.loss.tau=2"], _Sectioned)
    assert (task.loss, task.tau) == ("b", 2.0)


@pytest.mark.parametrize(
    ("text", "overrides", "words"),
    [
        ("task:\n  width: 4\n  model:\n    width: 8\n", [], "task.width is given twice"),
        ("task:\n  loss:\n    width: 8\n", [], "it belongs in task.model"),
        ("task:\n  model: 3\n", [], "task.model is a section"),
        ("task:\n  model:\n    nope: 1\n", [], "task.model has no setting 'nope'"),
        ("", ["task.model=3"], "task.model is a section, not a setting"),
        ("", ["task.optim.lr=1"], "task has no section 'optim'"),
        ("", ["task.model.tau=1"], "task.model has no setting 'tau'"),
        ("", ["task.model.width=many"], "task.width must be int"),
    ],
)
def test_misplaced_or_repeated_settings_are_one_sentence(tmp_path, text, overrides, words):
    with pytest.raises(ConfigError, match=words) as raised:
        load_config(_write(tmp_path, text), overrides, _Sectioned)
    assert "\n" not in raised.value.message


def test_saved_form_is_grouped_by_section_and_reads_back():
    config = _Sectioned(width=3, loss="b", options={"x": 1})
    saved = config_values(config)
    assert saved == {
        "model": {"width": 3, "depth": 2},
        "loss": {"loss": "b", "tau": 0.07},
        "train": {"options": {"x": 1}, "seed": 0},
    }
    assert config_from_mapping(_Sectioned, saved, "task") == config
    assert config_values(RunConfig()) == dataclasses.asdict(RunConfig())  # no sections: flat
    # a mapping field keeps its mapping value; it is never read as a section
    assert flatten_sections(_Sectioned, {"options": {"width": 1}}, "task") == {
        "options": {"width": 1}
    }


def test_a_bad_declaration_is_refused():
    @dataclasses.dataclass
    class Twice:
        a: int = 0
        SECTIONS: ClassVar[dict[str, Any]] = {"x": ("a",), "y": ("a",)}

    @dataclasses.dataclass
    class Missing:
        a: int = 0
        b: int = 0
        SECTIONS: ClassVar[dict[str, Any]] = {"x": ("a",)}

    @dataclasses.dataclass
    class Unknown:
        a: int = 0
        SECTIONS: ClassVar[dict[str, Any]] = {"x": ("a", "zz")}

    @dataclasses.dataclass
    class MappingName:
        x: dict[str, int] = dataclasses.field(default_factory=dict)
        SECTIONS: ClassVar[dict[str, Any]] = {"x": ("x",)}

    for cls, words in (
        (Twice, "in sections"),
        (Missing, "belong to no section"),
        (Unknown, "no field 'zz'"),
        (MappingName, "mapping field"),
    ):
        with pytest.raises(TypeError, match=words):
            section_fields(cls)


def test_every_task_config_declares_valid_sections_or_none():
    for name in task_names():
        sections = section_fields(task_module(name).CONFIG_CLASS)  # raises on a bad declaration
        if name == "topksiglip":
            assert list(sections) == ["model", "loss", "data", "train", "pretrain", "eval", "probe"]


# -- shipped recipes and model folders load unchanged -----------------------------------------


def _shipped_recipes() -> list[Path]:
    return [path for name in task_names() for path in task_recipes(name)]


def test_train_folder_links_every_packaged_recipe():
    """train/ is where users look; each of its recipes is the packaged file itself."""
    shown = sorted(TRAIN.glob("*.yaml"))
    assert [p.name for p in shown] == sorted(p.name for p in _shipped_recipes())
    for path in shown:
        assert path.resolve() in {p.resolve() for p in _shipped_recipes()}, path


def test_packaged_recipes_are_package_data():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    for path in _shipped_recipes():
        package = ".".join(path.parent.parent.relative_to(REPO / "src").parts)
        assert f'"{package}" = ["recipes/*.yaml"]' in text, package


@pytest.mark.parametrize("recipe", sorted(p.name for p in TRAIN.glob("*.yaml")))
def test_every_train_recipe_loads_and_resolves_as_its_flat_form(recipe):
    path = TRAIN / recipe
    task = next(name for name in task_names() if recipe.startswith(f"{name}_"))
    cls = task_module(task).CONFIG_CLASS
    run, settings = load_config(path, [], cls)
    assert isinstance(run, RunConfig) and dataclasses.is_dataclass(settings)
    flat = flatten_sections(cls, yaml.safe_load(path.read_text())["task"], "task")
    assert config_from_mapping(cls, flat, "task") == settings
    assert config_from_mapping(cls, config_values(settings), "task") == settings  # saved form


def _git_show(path: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "show", f"4476f79:{path}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


@pytest.mark.parametrize("recipe", ["topksiglip_demo", "topksiglip_embed", "topksiglip_tiny"])
def test_recipes_written_by_sections_resolve_as_their_former_flat_files(recipe):
    """The recipes as they stood before sections (commit 4476f79) give the same config."""
    former = _git_show(f"train/{recipe}.yaml")
    if former is None:
        pytest.skip("not a git checkout holding commit 4476f79")
    cls = task_module("topksiglip").CONFIG_CLASS
    old = yaml.safe_load(former)
    new = yaml.safe_load((TRAIN / f"{recipe}.yaml").read_text())
    assert old["run"] == new["run"]
    assert config_from_mapping(cls, old["task"], "task") == config_from_mapping(
        cls, new["task"], "task"
    )


def test_every_shipped_model_folder_loads_unchanged():
    """Each shipped folder's config.json as it is loads; the TopKSigLIP demo's stored recipe
    (flat, written before sections) resolves to the packaged recipe and to the folder's model."""
    from medvl_engine import demo_models
    from medvl_engine.encoders.demo import load_demo_folder
    from medvl_engine.models.topksiglip_folder import load_topksiglip
    from medvl_engine.tasks.topksiglip.demo_recipe import demo_config, flat_task_settings

    folders = sorted(p for p in demo_models.SHIPPED_ROOT.iterdir() if (p / "config.json").is_file())
    kinds = {}
    for folder in folders:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        kinds[folder.name] = config["model_type"]
        if config["model_type"] == "medvl-demo":
            assert load_demo_folder(folder, config, name=folder.name) is not None
            continue
        model = load_topksiglip(folder)
        cls = task_module("topksiglip").CONFIG_CLASS
        task = config_from_mapping(cls, flat_task_settings(config["recipe"]), "task")
        assert task == config_from_mapping(cls, flat_task_settings(demo_config()), "task")
        for name in (
            "image_size",
            "grid",
            "k",
            "vision_depths",
            "vision_hidden_sizes",
            "embed_dim",
        ):
            assert getattr(model.config, name) == getattr(task, name), name
    assert kinds == {"medvl-demo": "medvl-demo", "topksiglip-demo": "medvl-topksiglip"}
