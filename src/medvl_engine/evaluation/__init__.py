"""Evaluation metrics from their definitions, with bootstrap intervals (over rows, or over the
independent unit and paired: :mod:`~medvl_engine.evaluation.bootstrap`), the seeds a fresh
synthetic cohort may use (:mod:`~medvl_engine.evaluation.fresh_seeds`) and the count of
test-split reads (:mod:`~medvl_engine.evaluation.test_reads`); each paper's protocol lives with
its task (:mod:`medvl_engine.tasks.limit.evaluation`,
:mod:`medvl_engine.tasks.topksiglip.evaluation`)."""

from medvl_engine.evaluation.bootstrap import (
    PairedDifference,
    UnitInterval,
    paired_bootstrap,
    resample_rows,
    unit_bootstrap,
)
from medvl_engine.evaluation.fresh_seeds import (
    CHOICE_SEEDS,
    FRESH_SEED_START,
    check_fresh,
    fresh_seeds,
    used_seeds,
)
from medvl_engine.evaluation.metrics import (
    auroc,
    average_precision,
    balanced_accuracy,
    bootstrap_interval,
    bootstrap_std,
    macro_auroc,
    pointing_game,
    pointing_game_rate,
)
from medvl_engine.evaluation.test_reads import TEST_READS_FILE, count_test_read, read_count

__all__ = [
    "PairedDifference",
    "UnitInterval",
    "paired_bootstrap",
    "resample_rows",
    "unit_bootstrap",
    "auroc",
    "macro_auroc",
    "average_precision",
    "balanced_accuracy",
    "bootstrap_interval",
    "bootstrap_std",
    "pointing_game",
    "pointing_game_rate",
    "CHOICE_SEEDS",
    "FRESH_SEED_START",
    "check_fresh",
    "fresh_seeds",
    "used_seeds",
    "TEST_READS_FILE",
    "count_test_read",
    "read_count",
]
