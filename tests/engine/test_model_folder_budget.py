"""Model folders: sizes budgeted before anything is built, weights checked on load, every
sub-folder scanned for code (issue 26).

Hostile sizes run in a child process with an address-space limit (``run_limited``): the
refusal must come before any large allocation.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from medvl_engine.encoders import load_encoder
from medvl_engine.encoders.config_budget import check_config_sizes, estimate_parameters
from medvl_engine.encoders.folder_checks import refuse_code
from medvl_engine.errors import (
    MedVLError,
    ModelNotFoundError,
    ResourceLimitError,
    UnsafeModelError,
)

DEMO_MODELS = Path(__file__).resolve().parents[2] / "src" / "medvl_engine" / "demo_models"


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory, make_tiny_clip) -> Path:
    return make_tiny_clip(tmp_path_factory.mktemp("pristine") / "clip")


def _copy(source: Path, tmp_path: Path, name: str = "model") -> Path:
    return Path(shutil.copytree(source, tmp_path / name))


def _edit_config(folder: Path, edit) -> Path:
    path = folder / "config.json"
    values = json.loads(path.read_text())
    edit(values)
    path.write_text(json.dumps(values))
    return path


def _load_in_child(run_limited, folder: Path, loader: str = "encoder") -> tuple[int, str, float]:
    call = (
        f"load_encoder({str(folder)!r})"
        if loader == "encoder"
        else f"load_topksiglip({str(folder)!r})"
    )
    code = (
        "import sys\n"
        "from medvl_engine.errors import MedVLError\n"
        "from medvl_engine.encoders import load_encoder\n"
        "from medvl_engine.models.topksiglip_folder import load_topksiglip\n"
        "try:\n"
        f"    {call}\n"
        "except MedVLError as error:\n"
        "    print(error.message)\n"
        "    sys.exit(2)\n"
    )
    returncode, stdout, stderr, peak = run_limited(
        code, timeout_s=120, max_mb=1536, address_space_mb=4096
    )
    return returncode, stdout + stderr, peak


# -- sizes before allocation ------------------------------------------------------------------


def test_hidden_size_2_20_is_refused_before_any_allocation(clip_folder, tmp_path, run_limited):
    folder = _copy(clip_folder, tmp_path)
    _edit_config(folder, lambda v: v["text_config"].update(hidden_size=2**20))
    returncode, output, peak = _load_in_child(run_limited, folder)
    assert returncode == 2, output
    assert 'gives "text_config.hidden_size" as 1048576, but it must be a whole number' in output
    assert "between 1 and 65,536" in output
    assert peak < 1536  # was 2.9 GB before its refusal


def test_vision_image_size_1e5_is_refused(clip_folder, tmp_path):
    folder = _copy(clip_folder, tmp_path)
    _edit_config(folder, lambda v: v["vision_config"].update(image_size=100_000))
    with pytest.raises(ResourceLimitError, match=r'"vision_config.image_size" as 100000'):
        load_encoder(folder)


def test_many_layers_of_a_plausible_width_exceed_the_parameter_budget(
    clip_folder, tmp_path, monkeypatch
):
    folder = _copy(clip_folder, tmp_path)
    _edit_config(
        folder,
        lambda v: v["text_config"].update(hidden_size=8192, num_hidden_layers=1000),
    )
    with pytest.raises(
        ResourceLimitError, match="describes a model of about 269 billion parameters"
    ) as caught:
        load_encoder(folder)
    assert "MEDVL_MAX_MODEL_PARAMETERS" in caught.value.message
    monkeypatch.setenv("MEDVL_MAX_MODEL_PARAMETERS", "1e13")
    check_config_sizes(json.loads((folder / "config.json").read_text()), "x")  # now allowed


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("patch_size", 1, 'gives "patch_size" as 1, but it must be a tile side between 16'),
        ("patch_size", 1e9, 'gives "patch_size" as 1000000000.0'),
        ("target_mpp", 1e-6, 'gives "target_mpp" as 1e-06, but it must be between 0.05 and'),
        ("target_mpp", "fine", "gives \"target_mpp\" as 'fine', not a number"),
    ],
)
def test_encoder_tiling_that_would_queue_millions_of_patches_is_refused(
    key, value, words, tmp_path
):
    folder = _copy(DEMO_MODELS / "medvl-demo", tmp_path)
    _edit_config(folder, lambda v: v.update({key: value}))
    with pytest.raises((ResourceLimitError, ModelNotFoundError)) as caught:
        load_encoder(folder)
    assert words in caught.value.message


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        (
            "image_size",
            100_000,
            '{config} gives "image_size" as 100000, but it must be a whole number between 1',
        ),
        ("image_size", 16, '"image_size" in {config} must be between 32 and 16,384, got 16'),
        ("image_size", "big", "{config} gives \"image_size\" as 'big', but it must be a whole"),
        ("k", 0, '"k" in {config} must be between 1 and 65,536, got 0'),
        ("k", 65, '"k" in {config}=65 exceeds the 8x8 grid'),
        (
            "embed_dim",
            0,
            '{config} gives "embed_dim" as 0, but it must be a whole number between 1 and 65,536',
        ),
        ("vision_depths", [], '{config} gives "vision_depths" as [], but it must be a list of 1'),
        ("vision_depths", [1], '"vision_depths" in {config}=[1] needs 2 items'),
        ("low_res_factor", 0, '"low_res_factor" in {config} must be between 1 and 64'),
    ],
)
def test_topksiglip_folder_sizes_are_checked_before_the_model_is_built(key, value, words, tmp_path):
    from medvl_engine.models.topksiglip_folder import load_topksiglip

    folder = _copy(DEMO_MODELS / "topksiglip-demo", tmp_path)
    config = _edit_config(folder, lambda v: v.update({key: value}))
    with pytest.raises(MedVLError) as caught:  # ModelNotFoundError or ResourceLimitError
        load_topksiglip(folder)
    assert words.format(config=config) in caught.value.message
    assert "restore the model folder" in caught.value.message


def test_estimates_match_known_architectures():
    convnext_tiny = {"depths": [3, 3, 9, 3], "hidden_sizes": [96, 192, 384, 768]}
    assert 25e6 < estimate_parameters(convnext_tiny) < 30e6  # 28 M
    clip_text_b32 = {
        "text_config": {
            "hidden_size": 512,
            "intermediate_size": 2048,
            "num_hidden_layers": 12,
            "vocab_size": 49408,
            "max_position_embeddings": 77,
        }
    }
    assert 40e6 < estimate_parameters(clip_text_b32) < 80e6  # 63 M
    for folder in ("medvl-demo", "topksiglip-demo"):
        values = json.loads((DEMO_MODELS / folder / "config.json").read_text())
        check_config_sizes(values, folder)  # the shipped folders are within every limit


# -- weights checked on load ------------------------------------------------------------------


def _edit_weights(folder: Path, key: str, value: float) -> None:
    path = folder / "model.safetensors"
    state = load_file(str(path))
    state[key] = torch.full_like(state[key], value)
    save_file(state, str(path))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        (
            "vision.projection",
            float("nan"),
            "NaN or infinite values in the tensor 'vision.projection'",
        ),
        (
            "projection.weight",
            float("inf"),
            "NaN or infinite values in the tensor 'projection.weight'",
        ),
        ("vision.std", 0.0, "the scale 'vision.std' with zero or negative values"),
    ],
)
def test_demo_weights_with_nan_or_zero_std_are_refused(key, value, words, tmp_path):
    folder = _copy(DEMO_MODELS / "medvl-demo", tmp_path)
    _edit_weights(folder, key, value)
    with pytest.raises(ModelNotFoundError) as caught:
        load_encoder(folder)
    assert words in caught.value.message and "model.safetensors" in caught.value.message


def test_clip_with_an_all_zero_layernorm_is_refused(clip_folder, tmp_path):
    folder = _copy(clip_folder, tmp_path)
    key = "text_model.final_layer_norm.weight"
    _edit_weights(folder, key, 0.0)
    with pytest.raises(ModelNotFoundError, match=f"normalisation weight '{key}' as all zeros"):
        load_encoder(folder)


def test_topksiglip_with_nan_weights_is_refused(tmp_path):
    from medvl_engine.models.topksiglip_folder import load_topksiglip

    folder = _copy(DEMO_MODELS / "topksiglip-demo", tmp_path)
    _edit_weights(folder, "backbone.embeddings.layernorm.weight", float("nan"))
    with pytest.raises(ModelNotFoundError, match="'backbone.embeddings.layernorm.weight'"):
        load_topksiglip(folder)


# -- folder scans -----------------------------------------------------------------------------


def test_python_in_a_symlinked_sub_folder_is_refused(tmp_path, clip_folder):
    folder = _copy(clip_folder, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "modeling_evil.py").write_text("raise SystemExit('ran')\n")
    os.symlink(elsewhere, folder / "extras")
    with pytest.raises(UnsafeModelError, match=r"contains program code \(extras/modeling_evil.py"):
        load_encoder(folder)


def test_a_symlink_loop_ends_and_the_folder_still_loads(tmp_path, clip_folder):
    folder = _copy(clip_folder, tmp_path)
    os.symlink(folder, folder / "again")
    refuse_code(folder)  # each real folder is scanned once
    load_encoder(folder)


def test_a_folder_over_the_scan_cap_is_refused_not_passed(tmp_path, clip_folder):
    folder = _copy(clip_folder, tmp_path)
    padding = folder / "padding"
    padding.mkdir()
    for index in range(10_001):
        (padding / f"f{index:05d}").touch()
    (padding / "zzz_after_the_cap.py").write_text("x = 1\n")
    with pytest.raises(UnsafeModelError, match="holds more than 10,000 files and folders"):
        load_encoder(folder)


def test_shipped_model_folders_pass_every_check():
    from medvl_engine.encoders.folder_checks import check_model_folder, load_weights

    for name in ("medvl-demo", "topksiglip-demo"):
        check_model_folder(DEMO_MODELS / name)
        assert load_weights(DEMO_MODELS / name)


def test_the_scan_cap_follows_its_environment_setting(tmp_path, clip_folder, monkeypatch):
    folder = _copy(clip_folder, tmp_path)
    padding = folder / "padding"
    padding.mkdir()
    for index in range(60):
        (padding / f"f{index:02d}").touch()
    monkeypatch.setenv("MEDVL_MAX_MODEL_FOLDER_ENTRIES", "50")
    with pytest.raises(UnsafeModelError, match=r"more than 50 files .*MEDVL_MAX_MODEL_FOLDER_ENT"):
        load_encoder(folder)
    monkeypatch.setenv("MEDVL_MAX_MODEL_FOLDER_ENTRIES", "500")
    assert load_encoder(folder).embed_dim > 0
