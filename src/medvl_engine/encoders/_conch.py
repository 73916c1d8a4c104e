"""CONCH adapters: v1 through the optional `conch` package, v1.5 vision tower for features only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from medvl_engine.encoders._base import PatchTextEncoder
from medvl_engine.encoders._preprocess import ImagePreprocess
from medvl_engine.errors import MissingDependencyError, ModelNotFoundError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from medvl_engine.encoders._text_tower import TextTower

__all__ = [
    "CONCH_INSTALL",
    "ConchV1Encoder",
    "ConchV15Encoder",
    "TextTowerUnavailableError",
    "load_conch_v1",
    "load_conch_v15",
    "require_conch",
]

_OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
CONCH_INSTALL = "pip install git+https://github.com/mahmoodlab/CONCH"


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


class ConchV1Encoder(PatchTextEncoder):
    """CONCH v1 (CoCa ViT-B/16, 448 px): contrastive image and text embeddings [., 512]."""

    def __init__(
        self,
        model: torch.nn.Module,
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
        return self.model.encode_text(self.tokenize(texts).to(self.device), normalize=False)

    @property
    def text_tower(self) -> TextTower:
        """A trainable copy of the text side, [T, 512] (see :mod:`._conch_text`), for LIMIT."""
        if self.tokenizer is None:
            raise TextTowerUnavailableError(
                f"{self.name} was built without CONCH's tokenizer, so its text side cannot be "
                "tuned; load it with load_encoder."
            )
        from medvl_engine.encoders._conch_text import conch_text_tower

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
        return self.vision(self.preprocess(patches))

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        raise TextTowerUnavailableError(
            f"{self.name} can embed patches but not prompts: CONCH v1.5's patch-level text encoder "
            "is not public; use it for features only, or load a LIMIT-tuned text tower folder "
            "(model_type medvl-text-tower) whose vision_encoder is conch-v1.5, or use conch-v1."
        )


def load_conch_v1(
    checkpoint: Path, *, name: str, device: str | torch.device = "cpu"
) -> ConchV1Encoder:
    """CONCH v1 from its checkpoint file (``pytorch_model.bin`` of MahmoodLab/CONCH)."""
    require_conch(f"Loading {name}")
    from conch.open_clip_custom import create_model_from_pretrained, get_tokenizer, tokenize

    from medvl_engine.encoders._conch_text import register_conch_text

    register_conch_text()
    if checkpoint.is_dir():
        checkpoint = checkpoint / "pytorch_model.bin"
    if not checkpoint.is_file():
        raise ModelNotFoundError(
            f"CONCH checkpoint {checkpoint} does not exist; download MahmoodLab/CONCH from Hugging "
            "Face (request access first) and pass its folder or pytorch_model.bin.",
            checkpoint,
        )
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
    folder: Path, *, name: str, device: str | torch.device = "cpu"
) -> ConchV15Encoder:
    """CONCH v1.5's vision tower from a local MahmoodLab/TITAN snapshot (its ``return_conch()``)."""
    from transformers import AutoModel

    from medvl_engine.encoders._conch_text import register_conch_text

    register_conch_text()  # LIMIT-tuned CONCH text towers paired with v1.5 rebuild through it

    try:
        titan = AutoModel.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
        vision, _ = titan.return_conch()
    except ImportError as error:
        missing = error.name or str(error)
        raise MissingDependencyError(
            f"Loading {name} runs MahmoodLab/TITAN's own model code, which needs the package "
            f"'{missing}'; install it (`pip install {missing}`) and retry."
        ) from error
    except (OSError, AttributeError) as error:
        raise ModelNotFoundError(
            f"{folder} is not a usable MahmoodLab/TITAN snapshot holding CONCH v1.5 ({error}); "
            "download it with `huggingface-cli download MahmoodLab/TITAN` after requesting access.",
            folder,
        ) from error
    return ConchV15Encoder(vision, name=name, device=device)
