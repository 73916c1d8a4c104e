"""The backbone input of TopKSigLIP: the grey image, or the image and its white top-hats."""

from __future__ import annotations

import pytest
import torch

from medvl_engine.errors import ConfigError
from medvl_engine.models.convnext import backbone_input, grayscale_to_input, white_tophat


def _background_with_speck_and_square() -> torch.Tensor:
    """A 0.4 background with a one-pixel speck (0.9 at row 5, col 5) and a 4 x 4 square
    (0.7 at rows 12-15, cols 12-15): ``[1, 1, 24, 24]``."""
    image = torch.full((1, 1, 24, 24), 0.4)
    image[0, 0, 5, 5] = 0.9
    image[0, 0, 12:16, 12:16] = 0.7
    return image


def test_white_tophat_keeps_only_bright_structures_narrower_than_its_square():
    image = _background_with_speck_and_square()
    small = white_tophat(image, 3)[0, 0]
    assert small[5, 5].item() == pytest.approx(0.5)  # the speck, above its background
    assert small[12:16, 12:16].abs().max().item() == pytest.approx(0.0, abs=1e-7)  # 4 px: gone
    elsewhere = small.clone()
    elsewhere[5, 5] = 0.0
    assert elsewhere.abs().max().item() < 1e-6
    large = white_tophat(image, 5)[0, 0]
    assert large[12:16, 12:16].min().item() == pytest.approx(0.3)  # 4 px < 5 px: kept
    assert large[5, 5].item() == pytest.approx(0.5)


def test_white_tophat_of_a_crop_ignores_what_lies_beyond_its_border():
    image = _background_with_speck_and_square()
    crop = image[..., 4:10, 4:10]  # the speck one pixel in from the crop's corner
    assert torch.allclose(white_tophat(crop, 3), white_tophat(image, 3)[..., 4:10, 4:10])
    flat = torch.full((1, 1, 6, 6), 0.4)
    assert white_tophat(flat, 5).abs().max().item() == 0.0  # no edge artefacts


def test_backbone_input_channels():
    image = _background_with_speck_and_square().repeat(2, 1, 1, 1)
    assert torch.equal(backbone_input(image, "gray"), grayscale_to_input(image))
    pixels = backbone_input(image, "gray_tophat")
    assert pixels.shape == (2, 3, 24, 24)
    assert torch.allclose(pixels[:, 0], grayscale_to_input(image)[:, 0])
    assert pixels[0, 1, 5, 5].item() == pytest.approx(5.0)  # 0.5 above background / 0.1
    assert pixels[0, 1, 13, 13].item() == pytest.approx(0.0, abs=1e-6)
    assert pixels[0, 2, 13, 13].item() == pytest.approx(3.0)
    with pytest.raises(ConfigError, match="backbone input 'rgb' is not one of"):
        backbone_input(image, "rgb")  # type: ignore[arg-type]


def test_a_tophat_model_saves_and_loads_with_its_input(tmp_path, tiny_topk_model):
    from medvl_engine.models.topksiglip_folder import load_topksiglip, save_topksiglip

    torch.manual_seed(0)
    model = tiny_topk_model(tmp_path, vision_input="gray_tophat").eval()
    images = _background_with_speck_and_square()
    images = torch.nn.functional.interpolate(images, size=(256, 256)).repeat(2, 1, 1, 1)
    folder = save_topksiglip(model, tmp_path / "tophat")
    loaded = load_topksiglip(folder).eval()
    assert loaded.config.vision_input == "gray_tophat"
    with torch.no_grad():
        expected = model.encode_image(images).embedding
        assert torch.allclose(loaded.encode_image(images).embedding, expected, atol=1e-6)
        loaded.config.vision_input = "gray"  # the same weights reading the grey image
        assert not torch.allclose(loaded.encode_image(images).embedding, expected, atol=1e-3)


def test_an_unknown_backbone_input_in_a_training_config_is_refused(tmp_path):
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.training.config import load_config

    config = tmp_path / "c.yaml"
    config.write_text("task:\n  vision_input: rgb\n")
    with pytest.raises(ConfigError, match="vision_input"):
        load_config(config, [], TopKSigLIPTaskConfig)
