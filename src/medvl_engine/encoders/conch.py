"""CONCH adapters: v1 through the optional `conch` package, v1.5 vision tower for features only.

Neither runs code from a model folder: v1's architecture is the installed ``conch`` package's,
v1.5's is medvl's own (:mod:`._conch_v15`); checkpoints are read as tensors only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from medvl_engine.encoders._conch_v15 import CONCH_V15_MODEL_TYPE, ConchV15Config, ConchV15Vision
from medvl_engine.encoders._preprocess import ImagePreprocess
from medvl_engine.encoders.base import PatchTextEncoder
from medvl_engine.encoders.folder_checks import (
    check_model_folder,
    config_section,
    folder_errors,
    load_pickled_state_dict,
    load_weights,
    read_config,
    refuse_code,
    weights_mismatch,
)
from medvl_engine.errors import MissingDependencyError, ModelNotFoundError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from medvl_engine.encoders.text_tower import TextTower

__all__ = [
    "CONCH_INSTALL",
    "ConchV1Encoder",
    "ConchV15Encoder",
    "TextTowerUnavailableError",
    "conch_text_tower",
    "load_conch_v1",
    "load_conch_v15",
    "require_conch",
]

_OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
CONCH_INSTALL = "pip install git+https://github.com/mahmoodlab/CONCH"
TITAN_CONCH_WEIGHTS = "conch_v1_5_pytorch_model.bin"


class TextTowerUnavailableError(ModelNotFoundError):
    """The model has no public text encoder, so it cannot embed prompts."""


def require_conch(what: str) -> None:
    """Raise MissingDependencyError (with the pip line) unless the ``conch`` package imports."""
    try:
        import conch.open_clip_custom  # noqa: F401
    except ImportError as error:
        raise MissingDependencyError(
            f"{what} needs the optional CONCH package, which is not installed; run "
            f"`{CONCH_INSTALL}`."
        ) from error


class CoCaTransformer(Protocol):
    layers: int


class CoCaText(Protocol):
    """The text half of CONCH's CoCa model, as :func:`conch_text_tower` reads it."""

    context_length: int
    vocab_size: int
    width: int
    heads: int
    output_dim: int
    pad_id: int
    transformer: CoCaTransformer
    text_projection: torch.Tensor | None

    def state_dict(self) -> dict[str, torch.Tensor]: ...


class CoCaModel(Protocol):
    """What :class:`ConchV1Encoder` calls on CONCH's CoCa model (the conch package is untyped)."""

    text: CoCaText

    def to(self, device: torch.device) -> CoCaModel: ...

    def eval(self) -> CoCaModel: ...

    def encode_image(
        self, image: torch.Tensor, proj_contrast: bool = True, normalize: bool = True
    ) -> torch.Tensor: ...

    def encode_text(self, text: torch.Tensor, normalize: bool = True) -> torch.Tensor: ...


class ConchV1Encoder(PatchTextEncoder):
    """CONCH v1 (CoCa ViT-B/16, 448 px): contrastive image and text embeddings [., 512]."""

    def __init__(
        self,
        model: CoCaModel,
        tokenize: Callable[[list[str]], torch.Tensor],
        *,
        name: str,
        device: str | torch.device = "cpu",
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenize = tokenize
        self.tokenizer = tokenizer
        self.preprocess = ImagePreprocess(
            shortest_edge=448, crop_size=(448, 448), mean=_OPENAI_MEAN, std=_OPENAI_STD
        )
        self.name = name
        self.embed_dim = 512
        self.patch_size = 448
        self.target_mpp = 0.5

    def _embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        return self.model.encode_image(
            self.preprocess(patches), proj_contrast=True, normalize=False
        )

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        result: torch.Tensor = self.model.encode_text(
            self.tokenize(texts).to(self.device), normalize=False
        )
        return result

    @property
    def text_tower(self) -> TextTower:
        """A trainable copy of the text side, [T, 512] (see :mod:`._conch_text`), for LIMIT."""
        if self.tokenizer is None:
            raise TextTowerUnavailableError(
                f"{self.name} was built without CONCH's tokenizer, so its text side cannot be "
                "tuned; load it with load_encoder."
            )
        return conch_text_tower(self.model.text, self.tokenizer)


class ConchV15Encoder(PatchTextEncoder):
    """CONCH v1.5 vision tower (ViT-L/16, 448 px, [B, 768]); no public patch-level text tower."""

    def __init__(
        self,
        vision: torch.nn.Module,
        *,
        name: str,
        embed_dim: int = 768,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.vision = vision.to(self.device).eval()
        self.preprocess = ImagePreprocess(
            shortest_edge=448,
            crop_size=(448, 448),
            mean=(0.485, 0.456, 0.406),
            std=(0.229, 0.224, 0.225),
        )
        self.name = name
        self.embed_dim = embed_dim
        self.patch_size = 448
        self.target_mpp = 0.5

    def _embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.vision(self.preprocess(patches))
        return result

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        raise TextTowerUnavailableError(
            f"{self.name} can embed patches but not prompts: CONCH v1.5's patch-level text encoder "
            "is not public; use it for features only, or load a LIMIT-tuned text tower folder "
            "(model_type medvl-text-tower) whose vision_encoder is conch-v1.5, or use conch-v1."
        )


def load_conch_v1(
    checkpoint: Path, *, name: str, device: str | torch.device = "cpu"
) -> ConchV1Encoder:
    """CONCH v1 from its checkpoint file (``pytorch_model.bin`` of MahmoodLab/CONCH).

    The architecture comes from the installed ``conch`` package; the checkpoint is data and is
    first checked to unpickle to tensors only (``torch.load(weights_only=True)``).
    """
    require_conch(f"Loading {name}")
    from conch.open_clip_custom import create_model_from_pretrained, get_tokenizer, tokenize

    from medvl_engine.encoders.conch_text import register_conch_text

    register_conch_text()
    if checkpoint.is_dir():
        refuse_code(checkpoint, read_config(checkpoint, required=False))
        checkpoint = checkpoint / "pytorch_model.bin"
    if not checkpoint.is_file():
        raise ModelNotFoundError(
            f"CONCH checkpoint {checkpoint} does not exist; download MahmoodLab/CONCH from Hugging "
            "Face (request access first) and pass its folder or pytorch_model.bin.",
            checkpoint,
        )
    load_pickled_state_dict(checkpoint)  # refuses anything but tensors before conch reads it
    with folder_errors(checkpoint.parent, "CONCH v1 checkpoint files"):
        model, _ = create_model_from_pretrained("conch_ViT-B-16", checkpoint_path=str(checkpoint))
        tokenizer = get_tokenizer()
    return ConchV1Encoder(
        model,
        lambda texts: tokenize(texts=texts, tokenizer=tokenizer),
        name=name,
        device=device,
        tokenizer=tokenizer,
    )


def load_conch_v15(
    source: Path, *, name: str, device: str | torch.device = "cpu"
) -> ConchV15Encoder:
    """CONCH v1.5's vision tower, built by medvl's own code (:mod:`._conch_v15`).

    ``source`` is one of:

    - a MahmoodLab/TITAN snapshot: ``conch_v1_5_pytorch_model.bin`` is read with
      ``weights_only=True`` and the sizes come from config.json's ``conch_config``; the
      snapshot's Python files are never imported;
    - that ``.bin`` file itself (published sizes);
    - a medvl "conch-v1.5" folder: config.json with ``vision_config`` and model.safetensors
      (see :func:`._conch_v15.save_conch_v15_folder`); such a folder may hold no code.
    """
    from medvl_engine.encoders.conch_text import register_conch_text

    register_conch_text()  # LIMIT-tuned CONCH text towers paired with v1.5 rebuild through it
    source = Path(source)
    if source.is_file():
        state = load_pickled_state_dict(source)
        config = ConchV15Config(pos_grid=_pos_grid(state, source))
        return _conch_v15_encoder(config, state, source, name=name, device=device)
    settings = read_config(source, required=False) if source.is_dir() else {}
    titan_weights = source / TITAN_CONCH_WEIGHTS
    if settings.get("model_type") == CONCH_V15_MODEL_TYPE:
        settings = check_model_folder(source)
        vision_config = config_section(settings, "vision_config", source / "config.json")
        try:
            config = ConchV15Config.from_dict(vision_config)
            config.check()
        except (KeyError, ValueError, TypeError) as error:
            raise ModelNotFoundError(
                f'{source / "config.json"} has a missing or impossible "vision_config" size '
                f"({error.args[0] if error.args else 'unknown'}); restore the model folder.",
                source / "config.json",
            ) from error
        weights = source / "model.safetensors"
        return _conch_v15_encoder(config, load_weights(source), weights, name=name, device=device)
    if titan_weights.is_file():
        state = load_pickled_state_dict(titan_weights)
        conch_config = settings.get("conch_config") or {}
        if not isinstance(conch_config, dict):
            conch_config = {}
        try:
            config = ConchV15Config.from_titan(conch_config, _pos_grid(state, titan_weights))
            config.check()
        except (ValueError, TypeError) as error:
            raise ModelNotFoundError(
                f'{source / "config.json"} gives an impossible CONCH v1.5 size in "conch_config"; '
                "download MahmoodLab/TITAN again with `huggingface-cli download MahmoodLab/TITAN`.",
                source / "config.json",
            ) from error
        return _conch_v15_encoder(config, state, titan_weights, name=name, device=device)
    raise ModelNotFoundError(
        f"{source} holds neither {TITAN_CONCH_WEIGHTS} (a MahmoodLab/TITAN snapshot) nor a medvl "
        '"conch-v1.5" folder; download it with `huggingface-cli download MahmoodLab/TITAN` '
        "after requesting access.",
        source,
    )


def _pos_grid(state: dict[str, torch.Tensor], source: Path) -> int:
    """Side of the square grid the checkpoint's position table is stored for."""
    table = state.get("trunk.pos_embed")
    if table is None or table.ndim != 3:
        raise weights_mismatch(source, ["trunk.pos_embed"], [])
    side = math.isqrt(max(int(table.shape[1]) - 1, 0))
    if side < 1 or side * side + 1 != table.shape[1]:
        raise weights_mismatch(source, [], [])
    return side


def _conch_v15_encoder(
    config: ConchV15Config,
    state: dict[str, torch.Tensor],
    source: Path,
    *,
    name: str,
    device: str | torch.device,
) -> ConchV15Encoder:
    with folder_errors(source.parent, "CONCH v1.5 sizes and weights"):
        vision = ConchV15Vision(config)
    try:
        vision.load_state_dict(state, strict=True)
    except RuntimeError as error:
        own = vision.state_dict()
        missing = [key for key in own if key not in state]
        unexpected = [key for key in state if key not in own]
        raise weights_mismatch(source, missing, unexpected) from error
    return ConchV15Encoder(vision, name=name, embed_dim=config.embed_dim, device=device)


def conch_text_tower(
    text: CoCaText, tokenizer: PreTrainedTokenizerBase, *, max_length: int = 127
) -> TextTower:
    """A trainable :class:`TextTower` holding a copy of a loaded CONCH model's ``.text`` module.

    text: CONCH's TextTransformer (``model.text`` of ``create_model_from_pretrained``);
    tokenizer: CONCH's ``get_tokenizer()``. Output [T, embed_dim] equals CONCH's
    ``encode_text(..., normalize=False)`` for the same texts.
    """
    from torch import nn

    from medvl_engine.encoders.conch_text import (
        ConchTextConfig,
        ConchTextModel,
        register_conch_text,
    )
    from medvl_engine.encoders.text_tower import TextTower

    register_conch_text()
    if getattr(text, "cls_emb", None) is None or text.text_projection is None:
        raise ValueError("expected CONCH's CoCa text tower (with <cls> and text_projection)")
    config = ConchTextConfig(
        context_length=int(text.context_length),
        vocab_size=int(text.vocab_size),
        width=int(text.width),
        heads=int(text.heads),
        layers=int(text.transformer.layers),
        embed_dim=int(text.output_dim),
        model_pad_id=int(text.pad_id),
        pad_token_id=int(tokenizer.pad_token_id),
    )
    backbone = ConchTextModel(config)
    weights = {k: v for k, v in text.state_dict().items() if k != "text_projection"}
    backbone.text.load_state_dict(weights)
    projection = nn.Linear(config.width, config.embed_dim, bias=False)
    with torch.no_grad():
        projection.weight.copy_(text.text_projection.detach().T)
    tower = TextTower(
        backbone,
        tokenizer,
        pooling="pooler",
        projection=projection,
        max_length=min(max_length, config.context_length - 1),
    )
    return tower.to(text.text_projection.device)
