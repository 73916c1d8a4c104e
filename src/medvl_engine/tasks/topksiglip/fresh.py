"""Fresh synthetic cohorts for ``medvl-train topksiglip eval``: the headline figure.

A fresh cohort is a new synthetic cohort of ``task.fresh_cohort_size`` breasts drawn with a
cohort seed that no training, validation, test split or choice has used: cohort ``j`` has seed
``task.fresh_cohort_seed + j`` (default from
:data:`~medvl_engine.evaluation.fresh_seeds.FRESH_SEED_START` = 900000 on), and
:func:`fresh_cohort_seeds` refuses, with a one-sentence ConfigError, any seed in
:data:`~medvl_engine.evaluation.fresh_seeds.CHOICE_SEEDS` or among this run's split seeds
(``synthetic_seed``, ``+ 1``, ``+ 2``). Breast ``i`` of cohort ``s`` is generated with seed
``s * 100003 + i`` (:func:`~medvl_engine.tasks.topksiglip.cohorts.synthetic_records`), so two
cohort seeds give disjoint breasts as long as a cohort has fewer than 100,003 breasts.

Cohorts are written once under ``<synthetic root>/<rows>x<cols>_fresh<seed>_g<generator>/``
(the root is ``task.synthetic_dir`` or ``<run root>/synthetic``) and reused.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from medvl_engine.errors import ConfigError

if TYPE_CHECKING:
    from medvl_engine.data.mammo_dataset import MammoDataset
    from medvl_engine.data.patch_geometry import PatchGeometry
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.training.config import RunConfig

__all__ = ["TASK", "fresh_cohort_dataset", "fresh_cohort_seeds", "split_seeds"]

TASK = "topksiglip"  # the key of this task's seeds in CHOICE_SEEDS


def split_seeds(task_config: TopKSigLIPTaskConfig) -> list[int]:
    """The cohort seeds of this run's train, validation and test splits."""
    base = int(task_config.synthetic_seed)
    return [base, base + 1, base + 2]


def fresh_cohort_seeds(task_config: TopKSigLIPTaskConfig) -> list[int]:
    """Seeds of the ``task.fresh_cohorts`` cohorts; ConfigError for a manifest run or a seed
    already used for a choice (:func:`~medvl_engine.evaluation.fresh_seeds.check_fresh`)."""
    from medvl_engine.evaluation.fresh_seeds import fresh_seeds

    count = int(task_config.fresh_cohorts)
    if count and task_config.manifest:
        raise ConfigError(
            "task.fresh_cohorts draws new synthetic cohorts, which a model trained on a "
            "manifest was never meant to read; set task.fresh_cohorts=0 for a manifest."
        )
    return fresh_seeds(
        TASK, count, int(task_config.fresh_cohort_seed), run_seeds=split_seeds(task_config)
    )


def _cohort_folder(task_config: TopKSigLIPTaskConfig, run_config: RunConfig, seed: int) -> Path:
    from medvl_engine.synthetic import MAMMO_GENERATOR_VERSION
    from medvl_engine.training.seeds import run_root

    rows, cols = (int(v) for v in task_config.synthetic_size)
    root = Path(task_config.synthetic_dir or run_root(Path(run_config.out_dir)) / "synthetic")
    return root / f"{rows}x{cols}_fresh{seed}_g{MAMMO_GENERATOR_VERSION}"


def fresh_cohort_dataset(
    task_config: TopKSigLIPTaskConfig,
    run_config: RunConfig,
    seed: int,
    geometry: PatchGeometry,
) -> MammoDataset:
    """The unaugmented breasts of fresh cohort ``seed`` (written on first use), checked fresh
    again here so no caller can score a used seed as fresh."""
    from medvl_engine.data.mammo_dataset import MammoDataset, disk_cached_loader, load_breast
    from medvl_engine.evaluation.fresh_seeds import check_fresh
    from medvl_engine.tasks.topksiglip.cohorts import synthetic_records

    check_fresh(TASK, [seed], run_seeds=split_seeds(task_config))
    folder = _cohort_folder(task_config, run_config, seed)
    size = (int(task_config.synthetic_size[0]), int(task_config.synthetic_size[1]))
    records = synthetic_records(
        folder / "breasts-dicom", int(task_config.fresh_cohort_size), seed, "fresh", size
    )
    loader = disk_cached_loader(folder / "decoded", load_breast)
    return MammoDataset(records, geometry, None, seed=task_config.seed, cache=False, loader=loader)
