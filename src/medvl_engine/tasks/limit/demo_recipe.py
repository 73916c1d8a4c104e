"""The recipe of the demo model "medvl-demo": its fit, its held-out test and its rebuild.

The model (:mod:`medvl_engine.encoders.demo`): v = normalize(((f(x) - mu) / sigma) Q) for
patches, t = normalize(normalize(meanpool(MiniLM(text))) W) for text. Here mu/sigma [64] are
fitted on rendered synthetic tissue, Q [64, D] is a seeded matrix with orthonormal rows, and
W [384, D] is fitted in closed form by ridge regression, W = (T^T T + lambda I)^-1 T^T Y, mapping
captions T [n, 384] of synthetic tissue classes to the mean patch embedding Y [n, D] of the
classes they name. :func:`rebuild_shipped` (``make demo-models``) writes the shipped folder
``medvl_engine/demo_models/medvl-demo``; ``python -m medvl_engine.tasks.limit.demo_recipe
evaluate`` prints the shipped model's test-split metrics.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medvl_engine.common.atomic import atomic_directory
from medvl_engine.encoders.base import PatchTextEncoder
from medvl_engine.encoders.demo import (
    DEMO_MODEL_TYPE,
    DEMO_VERSION,
    EMBED_DIM,
    PATCH_SIZE,
    TARGET_MPP,
    TEXT_MODEL_PACKAGE,
    TEXT_MODEL_REFERENCE,
    DemoEncoder,
    demo_model_dir,
    fixed_order_matmul,
    load_shipped_demo,
    minilm_tower,
)
from medvl_engine.encoders.handcrafted import FEATURE_NAMES, handcrafted_features
from medvl_engine.encoders.text_tower import TextTower

__all__ = [
    "build_demo_model",
    "demo_config",
    "evaluate_demo_encoder",
    "fit_demo_model",
    "model_card",
    "rebuild_shipped",
]

_RIDGE_LAMBDA = 0.1
_PATCHES_PER_CLASS = 40
TEST_SEED = 10_000  # held-out test patches: a generator seed the fit never uses
TEST_PATCHES_PER_CLASS = 30
TEST_PROMPTS: dict[str, str] = {
    "background": "background",
    "tumor": "tumor",
    "stroma": "stroma",
    "lymphocytes": "lymphocytes",
    "adipose": "adipose tissue",
    "necrosis": "necrosis",
}
TISSUE_CLASS_NAMES = tuple(TEST_PROMPTS)

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


def fit_demo_model(
    seed: int = 0, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, torch.Tensor], DemoEncoder]:
    """Fit the demo model's statistics and matrices on synthetic tissue.

    Returns the tensors a model folder stores (``vision.mean`` [64], ``vision.std`` [64],
    ``vision.projection`` [64, D], ``projection.weight`` [D, 384]) and the ready encoder.
    Every random draw comes from ``seed``; no step depends on the number of threads.
    """
    from medvl_engine import synthetic

    say = progress or (lambda message: None)
    rng = np.random.default_rng(seed)
    say(f"rendering {_PATCHES_PER_CLASS} synthetic patches per tissue class (seed {seed})")
    patches, labels = [], []
    for class_id, class_name in enumerate(synthetic.TISSUE_CLASSES):
        for _ in range(_PATCHES_PER_CLASS):
            patches.append(synthetic.render_tissue(class_name, (PATCH_SIZE, PATCH_SIZE), rng))
            labels.append(class_id)
    with torch.inference_mode():
        raw = handcrafted_features(torch.from_numpy(np.stack(patches)))
    # Statistics, QR and the ridge solve run in numpy float64 (one thread's order, whatever
    # torch's thread count); torch's parallel reductions may split sums differently.
    raw64 = raw.numpy().astype(np.float64)
    mean = torch.from_numpy(raw64.mean(0)).float()
    std = torch.from_numpy(raw64.std(0, ddof=1)).float().clamp_min(1e-4)
    gaussian = np.random.default_rng(seed).standard_normal((EMBED_DIM, len(FEATURE_NAMES)))
    q, _ = np.linalg.qr(gaussian)
    projection = torch.from_numpy(np.ascontiguousarray(q.T)).float()  # [64, D], orthonormal rows
    embeddings = (
        torch.nn.functional.normalize(fixed_order_matmul((raw - mean) / std, projection), dim=-1)
        .numpy()
        .astype(np.float64)
    )
    label_array = np.asarray(labels)
    centroids = {
        name: embeddings[label_array == i].mean(0)
        for i, name in enumerate(synthetic.TISSUE_CLASSES)
    }
    say("encoding captions with the pretrained MiniLM text encoder")
    tower = minilm_tower()
    texts, caption_classes = _captions(rng)
    pooled = _encode_by_length(tower, texts).numpy().astype(np.float64)  # [T, 384]
    targets = np.stack(
        [np.mean([centroids[c] for c in names], axis=0) for names in caption_classes]
    )
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)  # [T, D]
    say("fitting the ridge map from text to patch embeddings")
    gram = pooled.T @ pooled
    ridge_np = np.linalg.solve(gram + _RIDGE_LAMBDA * np.eye(gram.shape[0]), pooled.T @ targets)
    ridge = torch.from_numpy(ridge_np).float()  # [384, D]
    tower.projection = torch.nn.Linear(ridge.shape[0], ridge.shape[1], bias=False)
    tower.projection.weight.data = ridge.T.contiguous()
    state = {
        "projection.weight": tower.projection.weight.data.contiguous(),
        "vision.mean": mean.contiguous(),
        "vision.std": std.contiguous(),
        "vision.projection": projection,
    }
    return state, DemoEncoder(mean, std, projection, tower)


def demo_config(seed: int) -> dict[str, Any]:
    """config.json of a demo folder whose text tower is the installed MiniLM plus a projection."""
    return {
        "model_type": DEMO_MODEL_TYPE,
        "version": DEMO_VERSION,
        "synthetic_demo": True,
        "embed_dim": EMBED_DIM,
        "patch_size": PATCH_SIZE,
        "target_mpp": TARGET_MPP,
        "vision": {"features": list(FEATURE_NAMES), "seed": seed},
        "text_model": TEXT_MODEL_REFERENCE,
        "text_model_package": TEXT_MODEL_PACKAGE,
        "pooling": "mean",
        "normalize_pooled": True,
        "projection": {"in_features": 384, "out_features": EMBED_DIM, "bias": False},
        "max_length": 128,
        "fit": {
            "patches_per_class": _PATCHES_PER_CLASS,
            "ridge_lambda": _RIDGE_LAMBDA,
            "caption_templates": len(CAPTION_TEMPLATES),
            "synthetic_reports": 40,
        },
    }


def evaluate_demo_encoder(encoder: PatchTextEncoder, seed: int = TEST_SEED) -> dict[str, Any]:
    """Patch-level zero-shot of ``encoder`` on held-out synthetic tissue (the model card's test).

    ``TEST_PATCHES_PER_CLASS`` patches of every tissue class, rendered from a generator seeded
    with ``seed`` (never used by the fit), are scored against one prompt per class
    (``TEST_PROMPTS``): prediction = argmax_k cos(v, t_k). Returns balanced accuracy and macro
    one-vs-rest AUROC, each ``{"value", "low", "high", "std"}`` (95% percentile bootstrap over
    patches, 1000 resamples, seed 0), and the number of patches.
    """
    from medvl_engine import synthetic
    from medvl_engine.evaluation.metrics import balanced_accuracy, bootstrap_interval, macro_auroc

    rng = np.random.default_rng(seed)
    classes = list(TEST_PROMPTS)
    patches, labels = [], []
    for class_id, class_name in enumerate(classes):
        for _ in range(TEST_PATCHES_PER_CLASS):
            patches.append(synthetic.render_tissue(class_name, (PATCH_SIZE, PATCH_SIZE), rng))
            labels.append(class_id)
    with torch.inference_mode():
        vision = encoder.encode_patches(np.stack(patches)).double()
        text = torch.nn.functional.normalize(
            encoder.encode_text([TEST_PROMPTS[c] for c in classes]).double(), dim=-1
        )
    scores = (torch.nn.functional.normalize(vision, dim=-1) @ text.T).numpy()
    y = np.asarray(labels)
    predictions = scores.argmax(1)

    def interval(metric: Callable[..., float], *arrays: np.ndarray) -> dict[str, float]:
        value, low, high, std = bootstrap_interval(metric, *arrays, n_resamples=1000, seed=0)
        return {"value": value, "low": low, "high": high, "std": std}

    return {
        "patches": int(len(y)),
        "classes": classes,
        "prompts": [TEST_PROMPTS[c] for c in classes],
        "seed": seed,
        "balanced_accuracy": interval(balanced_accuracy, y, predictions),
        "auroc": interval(macro_auroc, y, scores),
    }


_RECIPE_SOURCES = (
    "src/medvl_engine/encoders/demo.py",
    "src/medvl_engine/tasks/limit/demo_recipe.py",
    "src/medvl_engine/encoders/handcrafted.py",
    "src/medvl_engine/encoders/text_tower.py",
    "src/medvl_engine/synthetic/_tissue.py",
    "src/medvl_engine/synthetic/reports.py",
)


def _source_commit() -> str:
    """The git commit the model is built from ("+ changes" when the recipe's sources differ)."""
    import subprocess

    root = Path(__file__).resolve().parents[3]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", *_RECIPE_SOURCES],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not built from a git checkout)"
    return f"{commit} + uncommitted changes to the recipe's sources" if dirty else commit


def _interval_text(metric: dict[str, float]) -> str:
    return (
        f"{metric['value']:.3f} (95% bootstrap interval {metric['low']:.3f}-{metric['high']:.3f},"
        f" bootstrap std {metric['std']:.3f})"
    )


def model_card(config: dict[str, Any], metrics: dict[str, Any], commit: str) -> str:
    """MODEL_CARD.md of a shipped demo folder."""
    from medvl_engine.demo_models import DEMO_NOTICE

    fit = config["fit"]
    generator = (
        f"{fit['patches_per_class']} patches of {config['patch_size']} px per tissue class "
        f"({', '.join(TISSUE_CLASS_NAMES)}) at {config['target_mpp']} um/px; ridge lambda "
        f"{fit['ridge_lambda']}; captions: every class synonym in {fit['caption_templates']} "
        f"templates plus {fit['synthetic_reports']} synthetic reports."
    )
    from medvl_engine.tasks.limit.demo_baselines import card_section

    pairs = zip(metrics["classes"], metrics["prompts"], strict=True)
    classes = ", ".join(f'{c} ("{p}")' for c, p in pairs)
    checks = config.get("baseline_metrics")
    extra = "\n" + card_section(checks, config.get("limit_demo_evaluation")) if checks else ""
    return f"""# medvl-demo: {DEMO_NOTICE}

Offline pathology demo encoder: 64 handcrafted H&E descriptors (colour, stain densities,
texture) standardised and mapped by a fixed orthonormal matrix to {config["embed_dim"]}
dimensions; the pretrained all-MiniLM-L6-v2 text encoder (referenced by name, installed from
the PyPI package `{TEXT_MODEL_PACKAGE}`, not copied here) with a {config["embed_dim"]} x 384
ridge projection fitted in closed form to the patch embeddings of the tissue the captions name.

**Synthetic data, not for diagnosis.** Every patch it was fitted on is rendered by
`medvl_engine.synthetic.render_tissue`; it has never seen a real slide.

## How it was built
- Command: `make demo-models` (runs `python -m medvl_engine.tasks.demo_models medvl-demo`)
- Source commit: {commit}
- Seed: {config["vision"]["seed"]} (patches, orthonormal matrix and synthetic report captions)
- Generator settings: {generator}
- The fit is bitwise identical with 1 and 2 torch threads
  (`tests/engine/training/test_pathology_demo.py`).

## Test-split metrics
Patch-level zero-shot (prediction = argmax of cos(patch, prompt)) on {metrics["patches"]}
held-out synthetic patches rendered from seed {metrics["seed"]}, which the fit never uses:
classes and prompts {classes}.

- Balanced accuracy: {_interval_text(metrics["balanced_accuracy"])}
- Macro one-vs-rest AUROC: {_interval_text(metrics["auroc"])}

Printed by `python -m medvl_engine.tasks.limit.demo_recipe evaluate`; a default-tier test recomputes
them from the shipped weights and compares them with `config.json` (key `test_metrics`).
{extra}"""


def build_demo_model(
    out_dir: Path,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    limit_evaluation: dict[str, Any] | None = None,
) -> Path:
    """Fit the demo model and save it as a model folder at ``out_dir`` with its MODEL_CARD.md.

    The folder holds config.json (``"synthetic_demo": true``, the MiniLM reference, the
    test-split metrics, the no-text baselines and fresh cohorts, and ``limit_evaluation``:
    the LIMIT tuning demo's figures when given), model.safetensors (vision statistics,
    orthonormal matrix, text projection) and MODEL_CARD.md. Written to a temporary sibling
    folder and renamed, so a crash leaves the previous folder in place.
    """
    from safetensors.torch import save_file

    from medvl_engine.evaluation.fresh_seeds import fresh_seeds
    from medvl_engine.tasks.limit.demo_baselines import FRESH_COHORTS, demo_baselines

    say = progress or (lambda message: None)
    state, encoder = fit_demo_model(seed, progress)
    say("scoring the held-out test patches")
    metrics = evaluate_demo_encoder(encoder)
    say(f"scoring the no-text baselines and {FRESH_COHORTS} fresh cohorts")
    checks = demo_baselines(encoder, fresh_seeds("limit", FRESH_COHORTS), TEST_PROMPTS)
    config = {**demo_config(seed), "test_metrics": metrics, "baseline_metrics": checks}
    if limit_evaluation:
        config["limit_demo_evaluation"] = limit_evaluation
    card = model_card(config, metrics, _source_commit())

    def fill(staging: Path) -> None:
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(state, staging / "model.safetensors")
        (staging / "MODEL_CARD.md").write_text(card)

    return atomic_directory(Path(out_dir), fill, what="demo model folder")


def rebuild_shipped(
    progress: Callable[[str], None] | None = None, limit_evaluation: dict[str, Any] | None = None
) -> Path:
    """Rebuild the shipped folder ``medvl_engine/demo_models/medvl-demo`` (seed 0), keeping
    the LIMIT tuning demo's figures of the shipped card unless new ones are given."""
    shipped = demo_model_dir() / "config.json"
    if limit_evaluation is None and shipped.is_file():
        limit_evaluation = json.loads(shipped.read_text()).get("limit_demo_evaluation")
    return build_demo_model(demo_model_dir(), 0, progress, limit_evaluation)


def _print_evaluation() -> int:
    """``python -m medvl_engine.tasks.limit.demo_recipe evaluate``: the shipped test metrics."""
    metrics = evaluate_demo_encoder(load_shipped_demo())
    print(
        f"medvl-demo patch-level zero-shot on {metrics['patches']} held-out synthetic patches "
        f"(seed {metrics['seed']}, {len(metrics['classes'])} classes)"
    )
    print(f"balanced accuracy {_interval_text(metrics['balanced_accuracy'])}")
    print(f"macro AUROC       {_interval_text(metrics['auroc'])}")
    return 0


def _print_baselines() -> int:
    """``... demo_recipe baselines``: the no-text baselines and fresh cohorts of the card."""
    from medvl_engine.evaluation.fresh_seeds import fresh_seeds
    from medvl_engine.tasks.limit.demo_baselines import (
        FRESH_COHORTS,
        baseline_lines,
        demo_baselines,
    )

    _print_evaluation()
    checks = demo_baselines(load_shipped_demo(), fresh_seeds("limit", FRESH_COHORTS), TEST_PROMPTS)
    print("\n".join(baseline_lines(checks)))
    return 0


def refresh_shipped_card(limit_evaluation: dict[str, Any] | None) -> Path:
    """Re-evaluate the SHIPPED weights (no refit): the no-text baselines, fresh cohorts and
    ``limit_evaluation`` go into config.json and MODEL_CARD.md, whose "Source commit" (the
    commit the weights were built from) is kept. Each file is replaced atomically."""
    import re

    from medvl_engine.common.atomic import atomic_write
    from medvl_engine.evaluation.fresh_seeds import fresh_seeds
    from medvl_engine.tasks.limit.demo_baselines import FRESH_COHORTS, demo_baselines

    folder = demo_model_dir()
    config = json.loads((folder / "config.json").read_text())
    found = re.search(r"- Source commit: (.*)\n", (folder / "MODEL_CARD.md").read_text())
    commit = found.group(1) if found else _source_commit()
    checks = demo_baselines(load_shipped_demo(), fresh_seeds("limit", FRESH_COHORTS), TEST_PROMPTS)
    config["baseline_metrics"] = checks
    if limit_evaluation:
        config["limit_demo_evaluation"] = limit_evaluation
    card = model_card(config, config["test_metrics"], commit)
    text = json.dumps(config, indent=2) + "\n"
    atomic_write(folder / "config.json", lambda p: p.write_text(text), what="demo config")
    atomic_write(folder / "MODEL_CARD.md", lambda p: p.write_text(card), what="model card")
    return folder


def _refresh_card(evaluation_file: str) -> int:
    """``... demo_recipe card RUN/test_evaluation.json``: :func:`refresh_shipped_card` with the
    LIMIT tuning demo's figures of that ``medvl-train limit eval`` output."""
    from medvl_engine.tasks.limit.demo_baselines import limit_demo_figures

    recipe = "--config train/limit_demo.yaml"
    command = f"medvl-train limit {recipe} && medvl-train limit eval {recipe}"
    figures = limit_demo_figures(json.loads(Path(evaluation_file).read_text()), command)
    print(refresh_shipped_card(figures))
    return 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments == ["evaluate"]:
        sys.exit(_print_evaluation())
    if arguments == ["baselines"]:
        sys.exit(_print_baselines())
    if len(arguments) == 2 and arguments[0] == "card":
        sys.exit(_refresh_card(arguments[1]))
    print(
        "usage: python -m medvl_engine.tasks.limit.demo_recipe "
        "{evaluate | baselines | card RUN/test_evaluation.json}",
        file=sys.stderr,
    )
    sys.exit(2)
