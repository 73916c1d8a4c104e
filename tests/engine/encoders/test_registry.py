"""Encoder registry and adapters, on tiny random models saved as real folders (offline)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from medvl_engine.encoders import (
    ImagePreprocess,
    TextTowerUnavailableError,
    available_encoders,
    load_encoder,
    save_text_tower_folder,
)
from medvl_engine.errors import (
    MissingDependencyError,
    ModelNotFoundError,
    UnsupportedFormatError,
)


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory, make_tiny_clip) -> Path:
    return make_tiny_clip(tmp_path_factory.mktemp("models") / "tiny-clip")


def _patches(n: int = 3, h: int = 48, w: int = 40, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def test_clip_folder_matches_transformers_reference(clip_folder):
    from transformers import CLIPModel, CLIPTokenizer

    encoder = load_encoder(clip_folder)
    assert (encoder.embed_dim, encoder.patch_size) == (16, 32)
    patches = _patches()
    reference = CLIPModel.from_pretrained(clip_folder).eval()
    ours_pixels = encoder.preprocess(torch.from_numpy(patches))
    assert ours_pixels.shape == (3, 3, 32, 32)
    with torch.no_grad():
        pooled = reference.vision_model(pixel_values=ours_pixels).pooler_output
        expected_image = torch.nn.functional.normalize(reference.visual_projection(pooled), dim=-1)
        tokens = CLIPTokenizer.from_pretrained(clip_folder)(
            ["tumor", "a b c"], padding=True, return_tensors="pt"
        )
        text = reference.text_model(**tokens).pooler_output
        expected_text = torch.nn.functional.normalize(reference.text_projection(text), dim=-1)
    image = encoder.encode_patches(patches)
    torch.testing.assert_close(image, expected_image, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(image.norm(dim=1), torch.ones(3))
    torch.testing.assert_close(
        encoder.encode_text(["tumor", "a b c"]), expected_text, atol=1e-5, rtol=0
    )


def test_preprocess_agrees_with_clip_image_processor(clip_folder):
    from transformers import CLIPImageProcessor

    patches = _patches(2, 57, 41, seed=3)
    config = json.loads((clip_folder / "preprocessor_config.json").read_text())
    ours = ImagePreprocess.from_config(config)(torch.from_numpy(patches))
    theirs = CLIPImageProcessor.from_pretrained(clip_folder)(
        images=list(patches), return_tensors="pt"
    )["pixel_values"]
    assert ours.shape == theirs.shape == (2, 3, 32, 32)
    # PIL's bicubic and torch's antialiased bicubic differ by a few grey levels at most.
    assert (ours - theirs).abs().mean() < 0.03


def test_preprocess_resizes_shortest_edge_then_centre_crops():
    preprocess = ImagePreprocess(shortest_edge=4, crop_size=(4, 4), mean=(0, 0, 0), std=(1, 1, 1))
    image = torch.zeros(1, 4, 8, 3, dtype=torch.uint8)
    image[0, :, 2:6] = 255  # a bright central band 4 px wide, in (x) columns 2..5
    out = preprocess(image)
    assert out.shape == (1, 3, 4, 4)
    torch.testing.assert_close(out, torch.ones(1, 3, 4, 4), atol=1e-6, rtol=0)


def test_text_tower_folder_pairs_with_its_vision_encoder(
    clip_folder, tmp_path, make_tiny_bert_tower
):
    tower = make_tiny_bert_tower(out_dim=16)
    folder = save_text_tower_folder(
        tmp_path / "limit-tuned", tower, vision_encoder=str(clip_folder)
    )
    assert json.loads((folder / "config.json").read_text())["model_type"] == "medvl-text-tower"
    paired = load_encoder(folder)
    vision = load_encoder(clip_folder)
    patches = _patches()
    torch.testing.assert_close(paired.encode_patches(patches), vision.encode_patches(patches))
    expected = torch.nn.functional.normalize(tower.eval().encode(["tumor", "fat"]), dim=-1)
    torch.testing.assert_close(paired.encode_text(["tumor", "fat"]), expected, atol=1e-6, rtol=0)
    assert paired.embed_dim == 16 and paired.patch_size == vision.patch_size


def test_text_tower_of_the_wrong_width_is_refused(clip_folder, tmp_path, make_tiny_bert_tower):
    from medvl_engine.errors import ConfigError

    folder = save_text_tower_folder(tmp_path / "bad", make_tiny_bert_tower(8), str(clip_folder))
    with pytest.raises(ConfigError, match="projection to 16 dimensions"):
        load_encoder(folder)


def test_missing_hub_model_offline_fails_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError) as caught:
        load_encoder("plip")
    message = str(caught.value)
    assert (
        "vinid/plip" in message and "offline" in message and "huggingface-cli download" in message
    )
    with pytest.raises(ModelNotFoundError, match="someone/no-such-model"):
        load_encoder("someone/no-such-model")


def test_unknown_name_and_unknown_model_type_are_explained(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not a registered name.*medvl-demo"):
        load_encoder("no-such-model")
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "resnet"}))
    with pytest.raises(UnsupportedFormatError, match="model_type 'resnet'.*clip"):
        load_encoder(folder)


def test_conch_v1_needs_its_package(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "conch", None)  # make the optional package unimportable
    checkpoint = tmp_path / "pytorch_model.bin"
    checkpoint.write_bytes(b"")
    with pytest.raises(MissingDependencyError, match="github.com/mahmoodlab/CONCH"):
        load_encoder(checkpoint, model_type="conch-v1")


def test_conch_v15_embeds_patches_but_refuses_prompts():
    from medvl_engine.encoders.conch import ConchV15Encoder

    torch.manual_seed(0)
    vision = torch.nn.Sequential(
        torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(12, 8)
    )
    encoder = ConchV15Encoder(vision, name="conch-v1.5", embed_dim=8)
    features = encoder.encode_patches(_patches(2, 500, 480))
    assert features.shape == (2, 8)
    with pytest.raises(TextTowerUnavailableError, match="text encoder is not public"):
        encoder.encode_text(["tumor"])


def test_registry_lists_named_models():
    names = [entry.name for entry in available_encoders()]
    assert names[0] == "medvl-demo"
    assert {"plip", "quiltnet", "conch-v1", "conch-v1.5"} <= set(names)


def test_demo_model_is_a_saved_folder_whose_text_finds_its_tissue(demo_encoder):
    from medvl_engine.encoders.demo import demo_model_dir
    from medvl_engine.synthetic import TISSUE_CLASSES, render_tissue

    encoder = demo_encoder()
    folder = demo_model_dir()  # shipped inside the package
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "medvl-demo" and config["embed_dim"] == 256
    reloaded = load_encoder(folder)  # the same folder through the generic folder path
    rng = np.random.default_rng(7)
    classes = ["tumor", "stroma", "lymphocytes", "adipose", "necrosis"]
    patches = np.stack([render_tissue(c, (224, 224), rng) for c in classes for _ in range(6)])
    labels = np.repeat(np.arange(len(classes)), 6)
    image = encoder.encode_patches(patches)
    torch.testing.assert_close(reloaded.encode_patches(patches), image)
    text = encoder.encode_text(["tumor", "stroma", "lymphocytes", "adipose tissue", "necrosis"])
    assert image.shape == (30, 256) and text.shape == (5, 256)
    accuracy = float(((image @ text.T).argmax(1).numpy() == labels).mean())
    assert accuracy >= 0.9
    assert set(classes) <= set(TISSUE_CLASSES)


def test_hub_id_resolves_from_the_local_cache_offline(monkeypatch, tmp_path, clip_folder):
    import shutil

    hub = tmp_path / "hf" / "hub"
    repo = hub / "models--someone--tiny-clip"
    snapshot = repo / "snapshots" / ("a" * 40)
    shutil.copytree(clip_folder, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))  # read at import
    encoder = load_encoder("someone/tiny-clip")
    patches = _patches()
    torch.testing.assert_close(
        encoder.encode_patches(patches), load_encoder(clip_folder).encode_patches(patches)
    )
    assert encoder.name == "someone/tiny-clip"


def test_unreachable_hub_fails_at_once_even_when_offline_mode_is_off(monkeypatch, tmp_path):
    import huggingface_hub.constants

    from medvl_engine.encoders import _hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(_hub, "hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ModelNotFoundError, match="'vinid/plip'.*could not be reached"):
        load_encoder("plip")


def test_clip_text_side_saves_as_a_tower_paired_with_its_vision(clip_folder, tmp_path):
    clip = load_encoder(clip_folder)
    prompts = ["tumor", "a b c"]
    expected = clip.encode_text(prompts)
    torch.testing.assert_close(
        torch.nn.functional.normalize(clip.text_tower.encode(prompts), dim=-1), expected
    )
    folder = save_text_tower_folder(tmp_path / "plip-limit", clip.text_tower, str(clip_folder))
    paired = load_encoder(folder)
    torch.testing.assert_close(paired.encode_text(prompts), expected, atol=1e-6, rtol=0)
    patches = _patches()
    torch.testing.assert_close(paired.encode_patches(patches), clip.encode_patches(patches))


def test_demo_model_loads_from_the_package_even_with_an_unwritable_cache(monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("MEDVL_CACHE", str(blocker))
    encoder = load_encoder("medvl-demo")  # shipped: nothing is built into the cache
    assert encoder.encode_text(["tumor"]).shape == (1, 256)
    assert blocker.read_text() == "a file where the cache folder should be"
