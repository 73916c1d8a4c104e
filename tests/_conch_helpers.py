"""A tiny stand-in for the optional `conch` package, and tiny real CONCH v1.5 folders, for tests.

The CONCH v1.5 folders hold a small randomly initialised tower of medvl's own architecture, in
the two layouts medvl reads: a MahmoodLab/TITAN-shaped snapshot (whose Python files must never
run) and medvl's own "conch-v1.5" folder.

The `conch` stand-in follows CONCH's public conventions:
`create_model_from_pretrained(cfg, checkpoint_path=...)` -> (CoCa-like model, preprocess);
`get_tokenizer()` -> PreTrainedTokenizerFast with <start_of_text>/<end_of_text>/<pad>;
`tokenize(tokenizer, texts)` -> ids [T, 128] (127 padded + one <pad> slot for <cls>);
`transformer.TextTransformer` appends <cls>, masks <pad> and pools the <cls> state through
`text_projection` [width, embed_dim].
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

WORDS = (
    "tumor carcinoma stroma lymphocytes adipose necrosis fat tissue breast lung invasive "
    "benign no seen present with and of the a is in an image sections show fibrous"
).split()
TEXT_WIDTH = 32
EMBED_DIM = 512
V15_DIM = 768


class _Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.width = width
        self.layers = layers
        self.heads = heads
        self.resblocks = nn.ModuleList(
            nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True)
            for _ in range(layers)
        )

    def get_cast_dtype(self) -> torch.dtype:
        return self.resblocks[0].linear1.weight.dtype

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x, src_mask=attn_mask)
        return x


class TextTransformer(nn.Module):
    """Same constructor, attributes and forward contract as CONCH's CoCa text tower."""

    def __init__(
        self,
        context_length: int = 77,
        vocab_size: int = 49408,
        width: int = 512,
        heads: int = 8,
        layers: int = 12,
        ls_init_value: float | None = None,
        output_dim: int = 512,
        act_layer: type[nn.Module] = nn.GELU,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        embed_cls: bool = False,
        pad_id: int = 0,
        output_tokens: bool = False,
    ) -> None:
        super().__init__()
        self.output_tokens = output_tokens
        self.num_pos = self.context_length = context_length
        self.vocab_size = vocab_size
        self.width = width
        self.output_dim = output_dim
        self.heads = heads
        self.pad_id = pad_id
        self.text_projection = nn.Parameter(torch.randn(width, output_dim) * width**-0.5)
        self.cls_emb = nn.Parameter(torch.randn(width) * 0.1) if embed_cls else None
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.randn(self.num_pos, width) * 0.1)
        self.transformer = _Transformer(width, layers, heads)
        self.ln_final = norm_layer(width)
        causal = torch.full((self.num_pos, self.num_pos), float("-inf")).triu_(1)
        self.register_buffer("attn_mask", causal, persistent=False)

    def forward(self, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length = text.shape
        x = torch.cat([self.token_embedding(text), self.cls_emb.expand(batch, 1, -1)], dim=1)
        seq = length + 1
        keep = F.pad(text != self.pad_id, (0, 1), value=True)  # the <cls> sees real tokens only
        cls_row = torch.zeros(batch, seq, seq)
        cls_row[:, -1] = torch.where(keep, 0.0, float("-inf"))
        mask = self.attn_mask[:seq, :seq] + cls_row
        mask = mask.repeat_interleave(self.heads, 0)
        x = self.transformer(x + self.positional_embedding[:seq], mask)
        pooled, tokens = self.ln_final(x[:, -1]), x[:, :-1]
        if self.text_projection is not None:
            pooled = pooled @ self.text_projection
        return (pooled, tokens) if self.output_tokens else pooled


class FakeCoCa(nn.Module):
    """CoCa-shaped: ``encode_image(images, proj_contrast, normalize)`` [B, 512] and
    ``encode_text(ids [T, 128], normalize)`` [T, 512] (drops the last slot for <cls>)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.text = TextTransformer(
            context_length=128,
            vocab_size=vocab_size,
            width=TEXT_WIDTH,
            heads=4,
            layers=2,
            output_dim=EMBED_DIM,
            embed_cls=True,
            output_tokens=True,
        )
        self.visual = nn.Sequential(
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(3 * 16, EMBED_DIM)
        )

    def encode_image(
        self, images: torch.Tensor, normalize: bool = True, proj_contrast: bool = True
    ) -> torch.Tensor:
        latent = self.visual(images)
        return F.normalize(latent, dim=-1) if normalize else latent

    def encode_text(self, text: torch.Tensor, normalize: bool = True) -> torch.Tensor:
        latent, _ = self.text(text[:, :-1])
        return F.normalize(latent, dim=-1) if normalize else latent


def get_tokenizer():
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<start_of_text>", "<end_of_text>", "<unk>"]
    vocab = {token: index for index, token in enumerate([*specials, *WORDS])}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<start_of_text> $A <end_of_text>",
        special_tokens=[("<start_of_text>", 1), ("<end_of_text>", 2)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<start_of_text>",
        eos_token="<end_of_text>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


def tokenize(tokenizer, texts: list[str]) -> torch.Tensor:
    tokens = tokenizer(
        texts, max_length=127, truncation=True, padding="max_length", return_tensors="pt"
    )
    return F.pad(tokens["input_ids"], (0, 1), value=tokenizer.pad_token_id)


def create_model_from_pretrained(model_cfg: str, checkpoint_path: str):
    assert model_cfg == "conch_ViT-B-16"
    model = FakeCoCa(len(get_tokenizer()))
    model.load_state_dict(torch.load(checkpoint_path, weights_only=True))
    return model.eval(), None


def install_fake_conch(monkeypatch) -> None:
    """Put the stand-in `conch` package into sys.modules for the duration of one test."""
    package = types.ModuleType("conch")
    package.__path__ = []
    custom = types.ModuleType("conch.open_clip_custom")
    custom.__path__ = []
    custom.create_model_from_pretrained = create_model_from_pretrained
    custom.get_tokenizer = get_tokenizer
    custom.tokenize = tokenize
    transformer = types.ModuleType("conch.open_clip_custom.transformer")
    transformer.TextTransformer = TextTransformer
    package.open_clip_custom = custom
    custom.transformer = transformer
    monkeypatch.setitem(sys.modules, "conch", package)
    monkeypatch.setitem(sys.modules, "conch.open_clip_custom", custom)
    monkeypatch.setitem(sys.modules, "conch.open_clip_custom.transformer", transformer)


def write_conch_checkpoint(folder: Path, seed: int = 0) -> Path:
    """A CONCH-v1-shaped folder: ``pytorch_model.bin`` only, as MahmoodLab/CONCH ships it."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = FakeCoCa(len(get_tokenizer()))
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return folder


TINY_V15_SIZES = {
    "patch_size": 16,
    "width": 32,
    "embed_dim": V15_DIM,
    "depth": 2,
    "num_heads": 2,
    "mlp_ratio": 2.0,
    "qkv_bias": True,
    "pooler_queries": 1,
    "pooler_heads": 8,
    "pos_grid": 4,
}
MARKER_NAME = "folder-code-ran.txt"


def tiny_conch_v15(seed: int = 1):
    """A tiny randomly initialised CONCH v1.5 vision tower (medvl's own architecture)."""
    from medvl_engine.encoders._conch_v15 import ConchV15Config, ConchV15Vision

    torch.manual_seed(seed)
    vision = ConchV15Vision(ConchV15Config(**TINY_V15_SIZES)).eval()
    with torch.no_grad():
        for name, parameter in vision.named_parameters():
            if name.endswith("gamma"):  # layer scale: make the blocks matter
                parameter.uniform_(0.5, 1.0)
    return vision


def evil_code(marker: Path) -> str:
    """Python that would leave ``marker`` behind if anything ever imported it."""
    return f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"


def write_titan_snapshot(folder: Path, seed: int = 1) -> Path:
    """A MahmoodLab/TITAN-shaped snapshot holding a tiny CONCH v1.5 tower.

    Like the real one it ships Python files and an ``auto_map`` (here they would write
    ``folder.parent / MARKER_NAME`` if run); medvl must read only
    ``conch_v1_5_pytorch_model.bin`` (tensors) and the sizes in ``conch_config``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder.parent / MARKER_NAME
    for name in ("modeling_titan.py", "configuration_titan.py", "conch_v1_5.py"):
        (folder / name).write_text(evil_code(marker))
    sizes = TINY_V15_SIZES
    config = {
        "model_type": "titan",
        "architectures": ["Titan"],
        "auto_map": {
            "AutoConfig": "configuration_titan.TitanConfig",
            "AutoModel": "modeling_titan.Titan",
        },
        "conch_config": {
            "patch_size": sizes["patch_size"],
            "context_dim": sizes["width"],
            "embed_dim": sizes["embed_dim"],
            "depth": sizes["depth"],
            "num_heads": sizes["num_heads"],
            "mlp_ratio": sizes["mlp_ratio"],
            "qkv_bias": sizes["qkv_bias"],
            "init_values": 1e-6,
            "pooler_n_queries_contrast": sizes["pooler_queries"],
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(tiny_conch_v15(seed).state_dict(), folder / "conch_v1_5_pytorch_model.bin")
    return folder


def write_conch_v15_folder(folder: Path, seed: int = 1) -> Path:
    """A medvl "conch-v1.5" folder (config.json + model.safetensors) with the tiny tower."""
    from medvl_engine.encoders._conch_v15 import save_conch_v15_folder

    return save_conch_v15_folder(tiny_conch_v15(seed), folder)
