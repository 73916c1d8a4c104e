"""CONCH v1 on a stand-in `conch` package; CONCH v1.5 on tiny real folders (our architecture)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medvl_engine.encoders import TextTowerUnavailableError, load_encoder

PROMPTS = ["invasive carcinoma", "adipose tissue", "fibrous stroma with lymphocytes"]


def _patches(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(count, 64, 64, 3), dtype=np.uint8)


def test_conch_v1_loads_from_a_checkpoint_folder_and_embeds_both_sides(
    tmp_path,
    monkeypatch,
    install_fake_conch,
    write_conch_checkpoint,
    conch_tokenize,
    conch_embed_dim,
):
    install_fake_conch(monkeypatch)
    folder = write_conch_checkpoint(tmp_path / "CONCH")
    encoder = load_encoder(folder, model_type="conch-v1")
    assert (encoder.embed_dim, encoder.patch_size, encoder.target_mpp) == (512, 448, 0.5)

    images = encoder.encode_patches(_patches(3))
    texts = encoder.encode_text(PROMPTS)
    assert images.shape == (3, conch_embed_dim) and texts.shape == (3, conch_embed_dim)
    assert torch.allclose(images.norm(dim=1), torch.ones(3), atol=1e-5)
    assert torch.allclose(texts.norm(dim=1), torch.ones(3), atol=1e-5)
    assert not torch.allclose(texts[0], texts[1], atol=1e-3)  # different prompts, different rows

    expected = encoder.model.encode_text(conch_tokenize(encoder.tokenizer, PROMPTS), normalize=True)
    assert torch.allclose(texts, expected, atol=1e-5)
    same_file = load_encoder(folder / "pytorch_model.bin", model_type="conch-v1")
    assert torch.allclose(same_file.encode_text(PROMPTS), texts, atol=1e-6)


def test_conch_v1_text_tower_reproduces_conch_encode_text(
    tmp_path, monkeypatch, install_fake_conch, write_conch_checkpoint, conch_embed_dim
):
    install_fake_conch(monkeypatch)
    encoder = load_encoder(write_conch_checkpoint(tmp_path / "CONCH"), model_type="conch-v1")
    tower = encoder.text_tower
    assert tower.output_dim == conch_embed_dim and tower.pooling == "pooler"
    assert tower.projection.in_features == 32  # CONCH's text_projection, width -> 512
    with torch.no_grad():
        tuned_side = tower.encode(PROMPTS)
        raw = encoder.model.encode_text(encoder.tokenize(PROMPTS), normalize=False)
    assert torch.allclose(tuned_side, raw, atol=1e-5)
    tower.text.text.cls_emb.data.add_(1.0)  # the tower is a copy: the encoder is untouched
    with torch.no_grad():
        again = encoder.model.encode_text(encoder.tokenize(PROMPTS), normalize=False)
    assert torch.allclose(again, raw)


def test_conch_v1_checkpoint_missing_is_one_clear_error(tmp_path, monkeypatch, install_fake_conch):
    from medvl_engine.errors import ModelNotFoundError

    install_fake_conch(monkeypatch)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="MahmoodLab/CONCH"):
        load_encoder(tmp_path / "empty", model_type="conch-v1")


def _naive_conch_v15(vision, images: torch.Tensor) -> torch.Tensor:
    """CONCH v1.5 written out step by step from the architecture, in float64, no fused ops."""
    state = {k: v.double() for k, v in vision.state_dict().items()}
    sizes = vision.config
    x = images.double()
    patch = sizes.patch_size
    tokens = torch.nn.functional.conv2d(
        x,
        state["trunk.patch_embed.proj.weight"],
        state["trunk.patch_embed.proj.bias"],
        stride=patch,
    )
    tokens = tokens.flatten(2).transpose(1, 2)
    cls = state["trunk.cls_token"].expand(x.shape[0], -1, -1)
    x = torch.cat([cls, tokens], 1) + state["trunk.pos_embed"]

    def norm(x, prefix, eps):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * state[prefix + ".weight"] + state[
            prefix + ".bias"
        ]

    def attention(q, k, v, heads):
        b, nq, d = q.shape
        out = torch.empty(b, nq, d, dtype=q.dtype)
        step = d // heads
        for h in range(heads):
            cut = slice(h * step, (h + 1) * step)
            weights = torch.softmax(q[..., cut] @ k[..., cut].transpose(1, 2) / step**0.5, -1)
            out[..., cut] = weights @ v[..., cut]
        return out

    width = sizes.width
    for i in range(sizes.depth):
        p = f"trunk.blocks.{i}."
        h = norm(x, p + "norm1", 1e-6)
        qkv = h @ state[p + "attn.qkv.weight"].T + state[p + "attn.qkv.bias"]
        q, k, v = qkv[..., :width], qkv[..., width : 2 * width], qkv[..., 2 * width :]
        a = attention(q, k, v, sizes.num_heads) @ state[p + "attn.proj.weight"].T
        x = x + state[p + "ls1.gamma"] * (a + state[p + "attn.proj.bias"])
        h = norm(x, p + "norm2", 1e-6)
        h = h @ state[p + "mlp.fc1.weight"].T + state[p + "mlp.fc1.bias"]
        h = 0.5 * h * (1 + torch.erf(h / 2**0.5))
        h = h @ state[p + "mlp.fc2.weight"].T + state[p + "mlp.fc2.bias"]
        x = x + state[p + "ls2.gamma"] * h
    x = norm(x, "trunk.norm", 1e-6)
    pool = "attn_pool_contrast."
    query = norm(state[pool + "query"], pool + "ln_q", 1e-5) @ state[pool + "to_q.weight"].T
    kv = norm(x, pool + "ln_k", 1e-5) @ state[pool + "to_kv.weight"].T
    k, v = kv.chunk(2, -1)
    pooled = attention(query.expand(x.shape[0], -1, -1), k, v, sizes.pooler_heads)
    pooled = pooled @ state[pool + "to_out.weight"].T
    return norm(pooled[:, 0], "ln_contrast", 1e-5)


def test_conch_v15_tower_matches_a_step_by_step_reference(tiny_conch_v15, conch_v15_dim):

    vision = tiny_conch_v15()
    grid = vision.config.pos_grid * vision.config.patch_size  # the stored grid: no resizing
    images = torch.randn(2, 3, grid, grid)
    with torch.no_grad():
        ours = vision(images)
    assert ours.shape == (2, conch_v15_dim)
    torch.testing.assert_close(
        ours.double(), _naive_conch_v15(vision, images), atol=1e-4, rtol=1e-4
    )


def test_conch_v15_positions_are_resized_for_448_px_patches(tiny_conch_v15):

    trunk = tiny_conch_v15().trunk
    stored = trunk.pos_embed
    assert trunk.positions(4, 4) is stored
    grown = trunk.positions(28, 28)
    assert grown.shape == (1, 28 * 28 + 1, stored.shape[-1])
    assert torch.equal(grown[:, 0], stored[:, 0])  # <cls> keeps its embedding
    # the corners of a bicubic resize stay close to the stored corners
    torch.testing.assert_close(grown[0, 1], stored[0, 1], atol=0.05, rtol=0)


def test_conch_v15_from_a_titan_snapshot_never_runs_its_code(
    tmp_path, monkeypatch, write_titan_snapshot, conch_v15_dim, code_marker_name
):
    import medvl_engine.encoders._hub as hub

    folder = write_titan_snapshot(tmp_path / "TITAN")
    monkeypatch.setattr(hub, "resolve_model_dir", lambda source, *args: folder)
    encoder = load_encoder("conch-v1.5")  # the registry name resolves to the TITAN snapshot
    assert encoder.embed_dim == conch_v15_dim and encoder.patch_size == 448
    features = encoder.encode_patches(_patches(2))
    assert features.shape == (2, conch_v15_dim)
    assert torch.allclose(features.norm(dim=1), torch.ones(2), atol=1e-5)
    assert not torch.allclose(features[0], features[1], atol=1e-4)
    same = load_encoder(folder)  # the snapshot's own model_type "titan" reads the same tower
    assert torch.allclose(same.encode_patches(_patches(2)), features, atol=1e-6)
    assert not (tmp_path / code_marker_name).exists()
    with pytest.raises(TextTowerUnavailableError, match="text encoder is not public"):
        encoder.encode_text(["tumor"])


def test_conch_v15_medvl_folder_gives_the_same_features_as_the_snapshot(
    tmp_path, write_titan_snapshot, write_conch_v15_folder
):

    titan = load_encoder(write_titan_snapshot(tmp_path / "TITAN", seed=3), model_type="conch-v1.5")
    ours = load_encoder(write_conch_v15_folder(tmp_path / "conch15", seed=3))
    patches = _patches(3, seed=4)
    torch.testing.assert_close(ours.encode_patches(patches), titan.encode_patches(patches))


def test_conch_v15_snapshot_without_its_weights_says_what_to_download(
    tmp_path, write_titan_snapshot, code_marker_name
):
    from medvl_engine.errors import ModelNotFoundError

    folder = write_titan_snapshot(tmp_path / "TITAN")
    (folder / "conch_v1_5_pytorch_model.bin").unlink()
    with pytest.raises(ModelNotFoundError, match="huggingface-cli download MahmoodLab/TITAN"):
        load_encoder(folder, model_type="conch-v1.5")
    assert not (tmp_path / code_marker_name).exists()
