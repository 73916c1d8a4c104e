"""Normalisation of the pooled patch features before the projection (vision_pool_norm)."""

from __future__ import annotations

import pytest
import torch

from medvl_engine.models.topksiglip_folder import load_topksiglip, save_topksiglip

torch.set_num_threads(1)


def test_no_pool_norm_keeps_the_paper_state_dict(tmp_path, tiny_topk_model):
    model = tiny_topk_model(tmp_path)
    assert model.pool_norm is None
    assert not any(key.startswith("pool_norm") for key in model.state_dict())


def test_batchnorm_spreads_embeddings_and_reloads_with_its_statistics(tmp_path, tiny_topk_model):
    torch.manual_seed(0)
    model = tiny_topk_model(tmp_path, vision_pool_norm="batchnorm")
    images = torch.rand(4, 1, 256, 256) * 0.2 + torch.linspace(0.2, 0.6, 4).view(4, 1, 1, 1)
    model.train()
    pooled = model.encode_patches(images[:, None, :, :64, :64].expand(-1, 2, -1, -1, -1))
    centred = model.pool_norm(pooled)
    torch.testing.assert_close(centred.mean(dim=0), torch.zeros(64), atol=1e-5, rtol=0)
    model.encode_image(images)
    assert int(model.pool_norm.num_batches_tracked) == 2
    model.eval()
    with torch.no_grad():
        batch = model.encode_image(images).embedding
        single = torch.cat([model.encode_image(images[i : i + 1]).embedding for i in range(4)])
    torch.testing.assert_close(batch, single)  # eval uses running statistics, not the batch
    loaded = load_topksiglip(save_topksiglip(model, tmp_path / "saved"))
    torch.testing.assert_close(loaded.pool_norm.running_mean, model.pool_norm.running_mean)
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_image(images).embedding, batch)


def test_pool_norm_rejects_unknown_names(tmp_path, tiny_topk_model):
    with pytest.raises(KeyError):
        tiny_topk_model(tmp_path, vision_pool_norm="groupnorm")
