"""Seeds of fresh synthetic cohorts: generator seeds never used to train, validate, test or choose.

A synthetic model's headline figure is scored on cohorts drawn from seeds that no step before
it has seen. This module is the one list of the seeds each synthetic task has spent on a choice
(data a model was fitted or selected on, a test split that was read, a setting picked on
validation), :data:`CHOICE_SEEDS`, and hands out fresh ones from :data:`FRESH_SEED_START` on.
:func:`check_fresh` refuses a "fresh" seed that is in that list or among the seeds a run used
(its ``run.seed`` / ``run.seeds`` and data seed), with a one-sentence :class:`ConfigError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from medvl_engine.errors import ConfigError

__all__ = ["CHOICE_SEEDS", "FRESH_SEED_START", "check_fresh", "fresh_seeds", "used_seeds"]

FRESH_SEED_START = 900_000
"""The first seed handed out for fresh cohorts; every seed below it may have been used."""

CHOICE_SEEDS: Mapping[str, Mapping[int, str]] = MappingProxyType(
    {
        "limit": MappingProxyType(
            {
                0: "the LIMIT demo cohort (train, val and test splits) and the medvl-demo fit",
                1: "seed sweeps of the LIMIT demo (run.seeds=[0,1,2])",
                2: "seed sweeps of the LIMIT demo (run.seeds=[0,1,2])",
                10_000: "the held-out test patches of the medvl-demo model card",
                10_001: "the validation patches that choose the medvl-demo linear probe's C",
            }
        ),
        "topksiglip": MappingProxyType(
            {
                0: "the TopKSigLIP demo cohort (its training split) and seed sweeps",
                1: "the validation split of the TopKSigLIP demo cohort (synthetic_seed + 1; "
                "best/ and the recipe were chosen on it)",
                2: "the test split of the TopKSigLIP demo cohort (synthetic_seed + 2)",
            }
        ),
    }
)
"""Per task: the seeds spent on fitting, selection or a test split, and what each was used for."""


def used_seeds(task: str, run_seeds: Iterable[int] = ()) -> dict[int, str]:
    """The seeds of ``task`` that a fresh cohort may not use: :data:`CHOICE_SEEDS` plus
    ``run_seeds`` (the seeds of the run being evaluated: training, data and split seeds)."""
    if task not in CHOICE_SEEDS:
        raise ConfigError(f"no seed list for task {task!r}; known tasks: {sorted(CHOICE_SEEDS)}.")
    used = dict(CHOICE_SEEDS[task])
    for seed in run_seeds:
        used.setdefault(int(seed), "this run's training, data or split seed")
    return used


def check_fresh(task: str, seeds: Iterable[int], run_seeds: Iterable[int] = ()) -> None:
    """Raise :class:`ConfigError` when any of ``seeds`` was used for a choice of ``task``."""
    used = used_seeds(task, run_seeds)
    for seed in seeds:
        if int(seed) in used:
            raise ConfigError(
                f"seed {int(seed)} cannot give a fresh {task} cohort: it was used for "
                f"{used[int(seed)]}; use seeds from {FRESH_SEED_START} on."
            )
        if int(seed) < 0:
            raise ConfigError(
                f"seed {int(seed)} is negative; use seeds from {FRESH_SEED_START} on."
            )


def fresh_seeds(
    task: str, count: int, start: int = FRESH_SEED_START, run_seeds: Iterable[int] = ()
) -> list[int]:
    """``count`` consecutive seeds from ``start`` on, checked by :func:`check_fresh`."""
    if count < 0:
        raise ConfigError(f"the number of fresh cohorts must be 0 or more, got {count}.")
    seeds = list(range(start, start + count))
    check_fresh(task, seeds, run_seeds)
    return seeds
