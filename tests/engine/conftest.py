"""Fixtures of the engine tests: slides and mammograms with known pixels, tiny models saved as
real model folders, feature stores, and a stand-in for the optional `conch` package.

Helpers that make things are fixtures returning a function (``write_dicom(path, pixels, ...)``)
so one test can make as many as it needs; they are session-scoped because they hold no state.

The `conch` stand-in follows CONCH's public conventions:
`create_model_from_pretrained(cfg, checkpoint_path=...)` -> (CoCa-like model, preprocess);
`get_tokenizer()` -> PreTrainedTokenizerFast with <start_of_text>/<end_of_text>/<pad>;
`tokenize(tokenizer, texts)` -> ids [T, 128] (127 padded + one <pad> slot for <cls>);
`transformer.TextTransformer` appends <cls>, masks <pad> and pools the <cls> state through
`text_projection` [width, embed_dim]. The CONCH v1.5 folders hold a small randomly initialised
tower of medvl's own architecture, in the two layouts medvl reads: a MahmoodLab/TITAN-shaped
snapshot (whose Python files must never run) and medvl's own "conch-v1.5" folder.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
import torch.nn.functional as F
from torch import nn

# ---- slides and mammograms with known pixels


def _coordinate_image(height: int, width: int) -> np.ndarray:
    """[H, W, 3] uint8 whose pixels encode their own position: (row % 251, col % 241, 7)."""
    rows = (np.arange(height) % 251).astype(np.uint8)
    cols = (np.arange(width) % 241).astype(np.uint8)
    image = np.empty((height, width, 3), np.uint8)
    image[..., 0] = rows[:, None]
    image[..., 1] = cols[None, :]
    image[..., 2] = 7
    return image


def _pyramid(image: np.ndarray, levels: int) -> list[np.ndarray]:
    """Nearest-neighbour _pyramid: level k is image[::2**k, ::2**k]."""
    return [image[:: 2**k, :: 2**k] for k in range(levels)]


def _write_pyramid_tiff(
    path: Path,
    levels: list[np.ndarray],
    *,
    tile: int = 128,
    compression: str = "zlib",
    mpp: float | None = 0.5,
    ome: bool = False,
) -> Path:
    """A tiled pyramidal TIFF (level 0 page, coarser levels as SubIFDs)."""
    options = {"tile": (tile, tile), "photometric": "rgb", "compression": compression}
    first = dict(options, subifds=len(levels) - 1)
    if ome:
        metadata = {"axes": "YXS"}
        if mpp:
            metadata.update(PhysicalSizeX=mpp, PhysicalSizeY=mpp)
        first["metadata"] = metadata
    elif mpp:
        first.update(resolution=(1e4 / mpp, 1e4 / mpp), resolutionunit="CENTIMETER")
    with tifffile.TiffWriter(path, ome=ome) as writer:
        writer.write(levels[0], **first)
        for level in levels[1:]:
            writer.write(level, subfiletype=1, **options)
    return path


def _write_svs(
    path: Path, image: np.ndarray, *, compression: str = "jpeg", tile: int = 240, mpp: float = 0.25
) -> Path:
    """A one-level Aperio SVS (ImageDescription in Aperio's format) with the given tiles."""
    height, width = image.shape[:2]
    description = (
        f"Aperio Image Library v12.0.0 \r\n{width}x{height} [0,0 {width}x{height}] "
        f"({tile}x{tile}) {compression.upper()}/RGB Q=90|AppMag = 40|MPP = {mpp:.4f}|"
        "Filename = patient-smith|User = someone"
    )
    with tifffile.TiffWriter(path) as writer:
        writer.write(
            image,
            tile=(tile, tile),
            photometric="rgb",
            compression=compression,
            description=description,
        )
    return path


def _write_dicom(path: Path, pixels: np.ndarray | None, **attributes) -> Path:
    """An uncompressed (explicit VR little endian) grayscale DICOM image with extra attributes.

    ``pixels`` uint8, uint16 or int16 [H, W]; None writes a dataset without Pixel Data.
    Sequence attributes may be given as lists of dicts.
    """
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1.2"  # digital mammography
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = attributes.pop("transfer_syntax", ExplicitVRLittleEndian)
    dataset = Dataset()
    dataset.file_meta = meta
    dataset.SOPClassUID = meta.MediaStorageSOPClassUID
    dataset.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    dataset.Modality = "MG"
    dataset.PatientName = "Doe^Jane"
    dataset.PatientID = "PID-0042"
    dataset.PatientBirthDate = "19600101"
    if pixels is not None:
        bits = 8 if pixels.dtype == np.uint8 else 16
        dataset.Rows, dataset.Columns = pixels.shape
        dataset.SamplesPerPixel = 1
        dataset.PhotometricInterpretation = "MONOCHROME2"
        dataset.BitsAllocated = bits
        dataset.BitsStored = bits if bits == 8 else 12
        dataset.HighBit = dataset.BitsStored - 1
        dataset.PixelRepresentation = 1 if np.issubdtype(pixels.dtype, np.signedinteger) else 0
        data = np.ascontiguousarray(pixels).tobytes()
        if meta.TransferSyntaxUID.is_compressed:
            from pydicom.encaps import encapsulate

            data = encapsulate([data])
        dataset.PixelData = data
    for keyword, value in attributes.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            items = []
            for fields in value:
                item = Dataset()
                for key, inner in fields.items():
                    setattr(item, key, inner)
                items.append(item)
            value = Sequence(items)
        setattr(dataset, keyword, value)
    dataset.save_as(path, enforce_file_format=True)
    return path


def _write_sm_dicom(
    path: Path,
    image: np.ndarray,
    *,
    tile: int,
    series_uid: str,
    flavour: str = "VOLUME",
    sparse: bool = False,
    mpp: float = 0.25,
) -> Path:
    """A DICOM VL Whole Slide Microscopy instance, uncompressed RGB tiles (TILED_FULL or SPARSE).

    ``image`` [H, W, 3] uint8; edge tiles are padded with black. Sparse instances list
    their tiles in reverse order with per-frame positions, so frame order != tile order.
    """
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    height, width = image.shape[:2]
    rows, cols = -(-height // tile), -(-width // tile)
    padded = np.zeros((rows * tile, cols * tile, 3), np.uint8)
    padded[:height, :width] = image
    order = [(r, c) for r in range(rows) for c in range(cols)]
    if sparse:
        order = order[::-1]
    frames = [padded[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile] for r, c in order]

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.77.1.6"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.SeriesInstanceUID = series_uid
    ds.Modality = "SM"
    ds.PatientName = "Roe^Richard"
    ds.ContainerIdentifier = "SLIDE-77"
    ds.ImageType = ["DERIVED", "PRIMARY", flavour, "NONE"]
    ds.Rows = ds.Columns = tile
    ds.TotalPixelMatrixRows, ds.TotalPixelMatrixColumns = height, width
    ds.NumberOfFrames = len(frames)
    ds.DimensionOrganizationType = "TILED_SPARSE" if sparse else "TILED_FULL"
    ds.SamplesPerPixel = 3
    ds.PhotometricInterpretation = "RGB"
    ds.PlanarConfiguration = 0
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit = 7
    ds.PixelRepresentation = 0
    measures = Dataset()
    measures.PixelSpacing = [mpp / 1000, mpp / 1000]
    shared = Dataset()
    shared.PixelMeasuresSequence = Sequence([measures])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    optical = Dataset()
    optical.ObjectiveLensPower = 40
    ds.OpticalPathSequence = Sequence([optical])
    if sparse:
        groups = []
        for r, c in order:
            position = Dataset()
            position.RowPositionInTotalImagePixelMatrix = r * tile + 1
            position.ColumnPositionInTotalImagePixelMatrix = c * tile + 1
            group = Dataset()
            group.PlanePositionSlideSequence = Sequence([position])
            groups.append(group)
        ds.PerFrameFunctionalGroupsSequence = Sequence(groups)
    ds.PixelData = np.ascontiguousarray(np.stack(frames)).tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path


# ---- tiny CLIP and BERT models, the demo encoder, a plain patch grid


def _write_byte_bpe_tokenizer(folder: Path) -> int:
    """Write the byte-level CLIP tokenizer files (514 ids, no merges); return the vocab size."""
    from medvl_engine.models._clip_text import write_byte_level_tokenizer

    return len(write_byte_level_tokenizer(folder))


def _make_tiny_clip(folder: Path, image_size: int = 32, projection_dim: int = 16) -> Path:
    """Save a random CLIPModel + CLIPTokenizer + preprocessor_config.json to ``folder``."""
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = _write_byte_bpe_tokenizer(folder)
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    config = CLIPConfig(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 64,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": image_size,
            "patch_size": 8,
        },
        projection_dim=projection_dim,
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "CLIPImageProcessor",
                "do_resize": True,
                "size": {"shortest_edge": image_size},
                "do_center_crop": True,
                "crop_size": {"height": image_size, "width": image_size},
                "do_normalize": True,
                "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "resample": 3,
                "rescale_factor": 1 / 255,
            }
        )
    )
    return folder


def _make_tiny_bert_tower(out_dim: int):
    """A random 1-layer BertModel + WordPiece tokenizer as a TextTower -> [T, out_dim]."""
    import tempfile

    from transformers import BertConfig, BertModel, BertTokenizer

    from medvl_engine.encoders import TextTower

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz")
    words += ["tumor", "stroma", "fat", "necrosis", "lymphocytes", "##s", "##e"]
    with tempfile.TemporaryDirectory() as scratch:
        vocab = Path(scratch) / "vocab.txt"
        vocab.write_text("\n".join(words) + "\n")
        tokenizer = BertTokenizer(str(vocab))
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=24,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(1)
    projection = torch.nn.Linear(24, out_dim, bias=True)
    return TextTower(
        BertModel(config), tokenizer, pooling="cls", projection=projection, max_length=32
    )


_DEMO_CACHE: dict[str, object] = {}


def _demo_encoder():
    """The real "medvl-demo" encoder, built once per test process into a temporary cache."""
    import os
    import tempfile

    from medvl_engine.encoders import load_encoder

    if "encoder" not in _DEMO_CACHE:
        if "MEDVL_CACHE" not in os.environ:
            os.environ["MEDVL_CACHE"] = tempfile.mkdtemp(prefix="medvl-test-cache-")
        _DEMO_CACHE["encoder"] = load_encoder("medvl-demo")
    return _DEMO_CACHE["encoder"]


class RegularGrid:
    """A plain patch grid at level 0: every (x, y) multiple of ``stride`` whose patch fits."""

    def __init__(self, dimensions: tuple[int, int], patch_size: int, stride: int | None = None):
        stride = stride or patch_size
        width, height = dimensions
        xs = np.arange(0, width - patch_size + 1, stride)
        ys = np.arange(0, height - patch_size + 1, stride)
        grid_y, grid_x = np.meshgrid(ys, xs, indexing="ij")
        self.coords = np.stack([grid_x.ravel(), grid_y.ravel()], axis=1).astype(np.int64)
        self.patch_size = patch_size
        self.patch_size_level0 = patch_size
        self.level = 0
        self.target_mpp = 0.5


# ---- LIMIT: tiny text towers and feature stores

TOWER_WORDS = (
    "tumor carcinoma stroma lymphocytes adipose necrosis fat tissue breast lung colon "
    "invasive benign no seen present with and of the a is in"
).split()


def _tiny_tower(folder: Path, *, hidden: int = 32, out_dim: int | None = 16, seed: int = 0):
    """A randomly initialised 2-layer BERT + word-piece tokenizer saved to and loaded from disk."""
    from transformers import BertModel, BertTokenizerFast

    from medvl_engine.encoders import TextTower
    from tests.support.tiny_bert import write_tiny_bert

    write_tiny_bert(folder, TOWER_WORDS, hidden=hidden, max_positions=128, seed=seed)
    backbone = BertModel.from_pretrained(folder, local_files_only=True)
    tokenizer = BertTokenizerFast.from_pretrained(folder, local_files_only=True)
    projection = torch.nn.Linear(hidden, out_dim, bias=False) if out_dim else None
    return TextTower(backbone, tokenizer, pooling="mean", projection=projection, max_length=64)


def _write_feature_store(path: Path, features: np.ndarray, *, slide: str = "slide") -> Path:
    """A zarr feature store: "features" [N, D] float32, "coords" [N, 2] int64 (x, y) level 0."""
    import zarr

    group = zarr.open_group(str(path), mode="w")
    group.create_array("features", data=features.astype(np.float32))
    coords = np.stack([np.arange(len(features)) * 448, np.zeros(len(features))], axis=1)
    group.create_array("coords", data=coords.astype(np.int64))
    group.attrs.update(
        {
            "patch_size_level0": 448,
            "patch_size": 448,
            "target_mpp": 0.5,
            "encoder": "toy",
            "slide": slide,
        }
    )
    return path


# ---- a stand-in `conch` package and tiny CONCH v1.5 folders

CONCH_WORDS = (
    "tumor carcinoma stroma lymphocytes adipose necrosis fat tissue breast lung invasive "
    "benign no seen present with and of the a is in an image sections show fibrous"
).split()
TEXT_WIDTH = 32
CONCH_EMBED_DIM = 512
CONCH_V15_DIM = 768


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
            output_dim=CONCH_EMBED_DIM,
            embed_cls=True,
            output_tokens=True,
        )
        self.visual = nn.Sequential(
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(3 * 16, CONCH_EMBED_DIM)
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
    vocab = {token: index for index, token in enumerate([*specials, *CONCH_WORDS])}
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


def _install_fake_conch(monkeypatch) -> None:
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


def _write_conch_checkpoint(folder: Path, seed: int = 0) -> Path:
    """A CONCH-v1-shaped folder: ``pytorch_model.bin`` only, as MahmoodLab/CONCH ships it."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = FakeCoCa(len(get_tokenizer()))
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return folder


TINY_V15_SIZES = {
    "patch_size": 16,
    "width": 32,
    "embed_dim": CONCH_V15_DIM,
    "depth": 2,
    "num_heads": 2,
    "mlp_ratio": 2.0,
    "qkv_bias": True,
    "pooler_queries": 1,
    "pooler_heads": 8,
    "pos_grid": 4,
}
CODE_MARKER_NAME = "folder-code-ran.txt"


def _tiny_conch_v15(seed: int = 1):
    """A tiny randomly initialised CONCH v1.5 vision tower (medvl's own architecture)."""
    from medvl_engine.encoders._conch_v15 import ConchV15Config, ConchV15Vision

    torch.manual_seed(seed)
    vision = ConchV15Vision(ConchV15Config(**TINY_V15_SIZES)).eval()
    with torch.no_grad():
        for name, parameter in vision.named_parameters():
            if name.endswith("gamma"):  # layer scale: make the blocks matter
                parameter.uniform_(0.5, 1.0)
    return vision


def _evil_code(marker: Path) -> str:
    """Python that would leave ``marker`` behind if anything ever imported it."""
    return f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"


def _write_titan_snapshot(folder: Path, seed: int = 1) -> Path:
    """A MahmoodLab/TITAN-shaped snapshot holding a tiny CONCH v1.5 tower.

    Like the real one it ships Python files and an ``auto_map`` (here they would write
    ``folder.parent / CODE_MARKER_NAME`` if run); medvl must read only
    ``conch_v1_5_pytorch_model.bin`` (tensors) and the sizes in ``conch_config``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder.parent / CODE_MARKER_NAME
    for name in ("modeling_titan.py", "configuration_titan.py", "conch_v1_5.py"):
        (folder / name).write_text(_evil_code(marker))
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
    torch.save(_tiny_conch_v15(seed).state_dict(), folder / "conch_v1_5_pytorch_model.bin")
    return folder


def _write_conch_v15_folder(folder: Path, seed: int = 1) -> Path:
    """A medvl "conch-v1.5" folder (config.json + model.safetensors) with the tiny tower."""
    from medvl_engine.encoders._conch_v15 import save_conch_v15_folder

    return save_conch_v15_folder(_tiny_conch_v15(seed), folder)


@pytest.fixture(scope="session")
def coordinate_image():
    """``coordinate_image(height, width)`` -> [H, W, 3] uint8 encoding each pixel's position."""
    return _coordinate_image


@pytest.fixture(scope="session")
def pyramid():
    """``pyramid(image, levels)`` -> nearest-neighbour levels, level k = image[::2**k, ::2**k]."""
    return _pyramid


@pytest.fixture(scope="session")
def write_pyramid_tiff():
    """``write_pyramid_tiff(path, levels, tile=, compression=, mpp=, ome=)`` -> a pyramidal TIFF."""
    return _write_pyramid_tiff


@pytest.fixture(scope="session")
def write_svs():
    """``write_svs(path, image, compression=, tile=, mpp=)`` writes a one-level Aperio SVS."""
    return _write_svs


@pytest.fixture(scope="session")
def write_dicom():
    """``write_dicom(path, pixels, **attributes)`` writes a grayscale DICOM image."""
    return _write_dicom


@pytest.fixture(scope="session")
def write_sm_dicom():
    """``write_sm_dicom(path, image, tile=, series_uid=, ...)`` writes a DICOM WSI instance."""
    return _write_sm_dicom


@pytest.fixture(scope="session")
def make_tiny_clip():
    """``make_tiny_clip(folder, image_size=32, projection_dim=16)`` saves a random CLIP folder."""
    return _make_tiny_clip


@pytest.fixture(scope="session")
def make_tiny_bert_tower():
    """``make_tiny_bert_tower(out_dim)`` -> a random 1-layer BERT TextTower [T, out_dim]."""
    return _make_tiny_bert_tower


@pytest.fixture(scope="session")
def demo_encoder():
    """``demo_encoder()`` -> the real "medvl-demo" encoder, built once per test process."""
    return _demo_encoder


@pytest.fixture(scope="session")
def regular_grid():
    """``regular_grid(dimensions, patch_size, stride=None)`` -> a plain level-0 patch grid."""
    return RegularGrid


@pytest.fixture(scope="session")
def tiny_tower():
    """``tiny_tower(folder, hidden=32, out_dim=16, seed=0)`` -> a 2-layer BERT TextTower."""
    return _tiny_tower


@pytest.fixture(scope="session")
def write_feature_store():
    """``write_feature_store(path, features, slide=)`` writes a zarr feature store."""
    return _write_feature_store


@pytest.fixture(scope="session")
def install_fake_conch():
    """``install_fake_conch(monkeypatch)`` puts the `conch` stand-in into sys.modules."""
    return _install_fake_conch


@pytest.fixture(scope="session")
def write_conch_checkpoint():
    """``write_conch_checkpoint(folder, seed=0)`` writes a CONCH-v1-shaped folder."""
    return _write_conch_checkpoint


@pytest.fixture(scope="session")
def conch_tokenize():
    """The stand-in's ``tokenize(tokenizer, texts)`` -> ids [T, 128]."""
    return tokenize


@pytest.fixture(scope="session")
def tiny_conch_v15():
    """``tiny_conch_v15(seed=1)`` -> a tiny random CONCH v1.5 vision tower."""
    return _tiny_conch_v15


@pytest.fixture(scope="session")
def evil_code():
    """``evil_code(marker)`` -> Python that leaves ``marker`` behind if it ever runs."""
    return _evil_code


@pytest.fixture(scope="session")
def write_titan_snapshot():
    """``write_titan_snapshot(folder, seed=1)`` writes a TITAN-shaped tiny v1.5 snapshot."""
    return _write_titan_snapshot


@pytest.fixture(scope="session")
def write_conch_v15_folder():
    """``write_conch_v15_folder(folder, seed=1)`` writes medvl's "conch-v1.5" folder."""
    return _write_conch_v15_folder


@pytest.fixture(scope="session")
def conch_embed_dim():
    """Width of the stand-in CONCH v1 embeddings (512)."""
    return CONCH_EMBED_DIM


@pytest.fixture(scope="session")
def conch_v15_dim():
    """Width of the tiny CONCH v1.5 features (768)."""
    return CONCH_V15_DIM


@pytest.fixture(scope="session")
def code_marker_name():
    """Name of the file that folder code would leave beside its folder if it ever ran."""
    return CODE_MARKER_NAME
