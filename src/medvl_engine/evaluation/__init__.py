"""Evaluation: metrics from their definitions and pathology zero-shot protocols."""

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
from medvl_engine.evaluation.pathology import (
    SlideExample,
    slide_class_scores,
    zero_shot_patches,
    zero_shot_slides,
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
    "SlideExample",
    "slide_class_scores",
    "zero_shot_slides",
    "zero_shot_patches",
]
