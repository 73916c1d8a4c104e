"""Fresh synthetic cohorts for ``medvl-train limit eval`` and the count of test-split reads.

A fresh cohort is a new synthetic LIMIT cohort (:func:`make_synthetic_bags`) drawn from a seed
that no training, validation, test split or choice has used
(:mod:`medvl_engine.evaluation.fresh_seeds`); all its slides are evaluation slides. The
cohorts live under ``<run.out_dir>/fresh/seed-<s>/`` and are reused when present. Every
evaluation of the test split adds one to ``<run.out_dir>/test_reads.json``, so a report can say
how often the test split was looked at (:mod:`medvl_engine.evaluation.test_reads`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from medvl_engine.errors import ConfigError

if TYPE_CHECKING:
    from medvl_engine.data.manifest import SlideRecord
    from medvl_engine.tasks.limit.config import LimitTaskConfig
    from medvl_engine.training.config import RunConfig

__all__ = ["fresh_cohort", "fresh_cohort_seeds"]


def fresh_cohort_seeds(task_config: LimitTaskConfig, run_config: RunConfig) -> list[int]:
    """The seeds of the ``task.fresh_cohorts`` cohorts, refused (one-sentence ConfigError)
    when any was used by this run or listed as a choice seed."""
    from medvl_engine.evaluation.fresh_seeds import fresh_seeds

    count = task_config.fresh_cohorts
    if count and task_config.data != "synthetic":
        raise ConfigError(
            "task.fresh_cohorts draws new synthetic cohorts, so it needs task.data=synthetic; "
            "set task.fresh_cohorts=0 for a manifest."
        )
    used = [task_config.synthetic_seed, run_config.seed, *(run_config.seeds or [])]
    return fresh_seeds("limit", count, task_config.fresh_cohort_seed, run_seeds=used)


def fresh_cohort(
    root: Path, seed: int, task_config: LimitTaskConfig, run_seeds: list[int]
) -> list[SlideRecord]:
    """The slides of fresh cohort ``seed`` (made under ``root/fresh/seed-<seed>`` if absent)."""
    from medvl_engine.data import read_manifest
    from medvl_engine.evaluation.fresh_seeds import check_fresh
    from medvl_engine.tasks.limit.synthetic_bags import make_synthetic_bags

    check_fresh("limit", [seed], run_seeds=[task_config.synthetic_seed, *run_seeds])
    manifest = make_synthetic_bags(
        Path(root) / "fresh" / f"seed-{seed}",
        n_slides=task_config.fresh_cohort_size,
        test_fraction=1.0,
        val_fraction=0.0,
        seed=seed,
        encoder_name=task_config.vision_encoder,
    )
    return [record for record in read_manifest(manifest) if record.label]
