"""Evaluation metrics from their definitions, with bootstrap intervals; each paper's protocol lives
with its task (:mod:`medvl_engine.tasks.limit.evaluation`,
:mod:`medvl_engine.tasks.topksiglip.evaluation`)."""

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

__all__ = [
    "auroc",
    "macro_auroc",
    "average_precision",
    "balanced_accuracy",
    "bootstrap_interval",
    "bootstrap_std",
    "pointing_game",
    "pointing_game_rate",
]
