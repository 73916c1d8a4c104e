"""Property-based fuzzing of the config readers (issue 26).

Random YAML documents, random bytes and random ``key=value`` overrides must either load into
a config whose every value lies in its declared range, or raise a MedVLError (one sentence):
never another exception, never a hang.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medvl_engine.common.config_ranges import field_range
from medvl_engine.errors import MedVLError
from medvl_engine.tasks.limit.task import LimitTaskConfig
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.training import RunConfig, load_config
from medvl_engine.training.config import section_fields

TASKS = (TopKSigLIPTaskConfig, LimitTaskConfig)
NAMES = sorted(
    {f.name for f in dataclasses.fields(RunConfig)}
    | {f.name for cls in TASKS for f in dataclasses.fields(cls)}
    | {name for cls in TASKS for name in section_fields(cls)}  # task settings by sections
)
FUZZ = settings(
    max_examples=int(os.environ.get("MEDVL_FUZZ_EXAMPLES", "60")),  # more for a deeper run
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["none", "null", "auto", "rules", "cosine", "/dev/null", "1e-5", "x.py:f"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.sampled_from(NAMES), st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=20,
)
sections = st.dictionaries(st.sampled_from(NAMES), values, max_size=6)
documents = st.one_of(
    st.fixed_dictionaries({}, optional={"run": sections, "task": sections}),
    values,
)


def _assert_in_range(config: object, section: str) -> None:
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        rule = field_range(type(config), field)
        value = getattr(config, field.name)
        if rule is None or value is None:
            continue
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if isinstance(item, int | float) and not isinstance(item, bool):
                assert math.isfinite(item), f"{section}.{field.name}={value!r}"
                assert rule.problem(item) is None, f"{section}.{field.name}={value!r}"


def _load(path: Path | None, overrides: list[str], task_cls: type) -> None:
    try:
        run, task = load_config(path, overrides, task_cls)
    except MedVLError as error:
        assert error.message.strip() and "\n" not in error.message.strip()
        return
    _assert_in_range(run, "run")
    _assert_in_range(task, "task")


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative out_dir values point inside; nothing is created


@FUZZ
@given(document=documents, task_cls=st.sampled_from(TASKS))
def test_random_yaml_documents_load_or_raise_medvl_error(document, task_cls):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
        _load(path, [], task_cls)
        assert sorted(os.listdir(folder)) == ["config.yaml"]


@FUZZ
@given(data=st.binary(max_size=300), task_cls=st.sampled_from(TASKS))
def test_random_bytes_as_a_config_file_load_or_raise_medvl_error(data, task_cls):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_bytes(data)
        _load(path, [], task_cls)


overrides = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda prefix, key, value: f"{prefix}{key}={value}",
        st.sampled_from(["", "run.", "task.", "model.", "task.model.", "task.loss.", "task.data."]),
        st.sampled_from(NAMES),
        st.one_of(
            st.text(max_size=20),
            values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()),
        ),
    ),
)


@FUZZ
@given(items=st.lists(overrides, max_size=4), task_cls=st.sampled_from(TASKS))
def test_random_overrides_load_or_raise_medvl_error(items, task_cls):
    _load(None, items, task_cls)


def test_every_numeric_field_declares_its_range():
    """Each int/float/list-of-int field of the run and task configs has a declared range."""
    for cls in (RunConfig, *TASKS):
        hints = __import__("typing").get_type_hints(cls)
        for field in dataclasses.fields(cls):
            text = str(hints[field.name])
            numeric = any(word in text for word in ("int", "float")) and "str" not in text
            if numeric and hints[field.name] is not bool:
                assert field_range(cls, field) is not None, f"{cls.__name__}.{field.name}"


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**64), max_value=2**64),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.sampled_from(
                [
                    "hidden_size",
                    "num_hidden_layers",
                    "num_attention_heads",
                    "intermediate_size",
                    "image_size",
                    "patch_size",
                    "target_mpp",
                    "vocab_size",
                    "text_config",
                    "vision_config",
                    "hidden_sizes",
                    "depths",
                    "vision_depths",
                    "vision_hidden_sizes",
                    "k",
                    "grid",
                    "embed_dim",
                ]
            ),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=25,
)


@FUZZ
@given(values=st.dictionaries(st.text(max_size=12), json_values, max_size=6) | json_values)
def test_random_model_configs_are_read_or_refused_in_one_sentence(values):
    """A model folder's config.json: read, or one MedVLError sentence; never another error."""
    import json

    from medvl_engine.encoders.folder_checks import read_config

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(values))
        try:
            read = read_config(Path(folder))
        except MedVLError as error:
            assert error.message.strip() and "\n" not in error.message.strip()
            return
        assert isinstance(read, dict)


@FUZZ
@given(
    changes=st.dictionaries(
        st.sampled_from(
            [
                "image_size",
                "grid",
                "k",
                "low_res_factor",
                "overlap",
                "vision_depths",
                "vision_hidden_sizes",
                "embed_dim",
                "text_config",
                "tau_start",
                "context_length",
            ]
        ),
        json_values,
        max_size=4,
    )
)
def test_random_topksiglip_settings_are_checked_in_one_sentence(changes):
    """TopKSigLIP model settings as a saved folder's config.json holds them."""
    from medvl_engine.models.topksiglip import TopKSigLIPConfig
    from medvl_engine.models.topksiglip_ranges import check_topksiglip_values

    config = TopKSigLIPConfig.from_dict({**TopKSigLIPConfig().to_dict(), **changes})
    try:
        check_topksiglip_values(config, section="config.json", key_format='"{field}" in {section}')
    except MedVLError as error:
        assert error.message.strip() and "\n" not in error.message.strip()
