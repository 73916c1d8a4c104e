"""One run per seed (``run.seeds``): configs, folders, and mean +- std over seeds.

``medvl-train TASK --config F run.seeds=[0,1,2]`` trains one run per seed ``s`` into
``<run.out_dir>/seed-<s>`` with ``run.seed = s`` (and ``task.seed = s`` when the task config
has a ``seed`` field, so data order and augmentation vary with the seed too). An ``eval``
action reads each seed's selected model from ``<run.out_dir>/seed-<s>/best``; without
``run.seeds`` it reads ``<run.out_dir>/best``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import ConfigError

if TYPE_CHECKING:
    from medvl_engine.training.config import RunConfig

__all__ = [
    "SeedRun",
    "seed_runs",
    "seed_out_dir",
    "selected_model_dirs",
    "mean_std_over_seeds",
    "run_root",
    "seed_spread",
]


@dataclass(frozen=True)
class SeedRun:
    """One run of a seed sweep: its seed (None without ``run.seeds``) and its two configs."""

    seed: int | None
    run_config: RunConfig
    task_config: Any


def seed_out_dir(out_dir: str | Path, seed: int) -> Path:
    """``<out_dir>/seed-<seed>``: the folder of one seed's run."""
    return Path(out_dir) / f"seed-{int(seed)}"


def seed_runs(run_config: RunConfig, task_config: Any) -> list[SeedRun]:
    """The runs ``run.seeds`` asks for (one per seed), or the configs as given without it.

    Each seed's run config has ``seed = s``, ``seeds = None`` and ``out_dir =
    <out_dir>/seed-<s>``; a task config with a ``seed`` field gets ``seed = s`` as well.
    """
    seeds = getattr(run_config, "seeds", None)
    if not seeds:
        return [SeedRun(None, run_config, task_config)]
    runs = []
    for seed in seeds:
        run = dataclasses.replace(
            run_config,
            seed=int(seed),
            seeds=None,
            out_dir=str(seed_out_dir(run_config.out_dir, seed)),
        )
        task = task_config
        if (
            dataclasses.is_dataclass(task_config)
            and not isinstance(task_config, type)
            and any(f.name == "seed" for f in dataclasses.fields(task_config))
        ):
            task = dataclasses.replace(task_config, seed=int(seed))
        runs.append(SeedRun(int(seed), run, task))
    return runs


def selected_model_dirs(run_config: RunConfig, name: str = "best") -> list[tuple[int | None, Path]]:
    """``(seed, folder)`` of each run's model chosen on validation (``<run dir>/<name>``).

    Raises ConfigError naming the missing folders and the command that writes them.
    """
    found = [(run.seed, Path(run.run_config.out_dir) / name) for run in seed_runs(run_config, None)]
    missing = [str(folder) for _, folder in found if not (folder / "config.json").is_file()]
    if missing:
        raise ConfigError(
            f"no saved model in {', '.join(missing)}; train first with the same --config and "
            "run.out_dir (and run.seeds) and a run.select_metric that validation measures (it "
            "picks best/), or evaluate a model folder with task.init_from=FOLDER."
        )
    return found


def seed_spread(values: Sequence[float]) -> dict[str, float]:
    """``{mean, std, min, max}`` of one figure's per-seed (or per-cohort) values (std with
    ``ddof = 0``)."""
    array = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(array.mean()),
        "std": float(array.std()),
        "min": float(array.min()),
        "max": float(array.max()),
    }


def mean_std_over_seeds(
    per_seed: Sequence[Mapping[str, float]],
) -> dict[str, tuple[float, float, int]]:
    """Per key: ``(mean, std, n)`` over the seeds whose value is finite (population std,
    ``ddof = 0``; 0 for one seed). Keys missing from a seed are left out of that key's mean."""
    keys = sorted({key for values in per_seed for key in values})
    summary: dict[str, tuple[float, float, int]] = {}
    for key in keys:
        values = [float(v[key]) for v in per_seed if key in v and math.isfinite(float(v[key]))]
        if values:
            summary[key] = (float(np.mean(values)), float(np.std(values)), len(values))
    return summary


def run_root(out_dir: str | Path) -> Path:
    """The folder of the whole sweep: the parent of a ``seed-<s>`` run folder, else
    ``out_dir`` itself (where files shared by the seeds' runs, e.g. a synthetic cohort, go)."""
    path = Path(out_dir)
    name = path.name
    if name.startswith("seed-") and name[5:].lstrip("-").isdigit():
        return path.parent
    return path
