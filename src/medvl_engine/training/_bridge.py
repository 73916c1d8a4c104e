"""A least-squares bridge from one encoder's embedding space to another's (Conch-Z).

The Conch-Z recipe tunes CONCH v1's text tower (joint space, 512) over CONCH v1.5 patch
features (768). A random ``512 -> 768`` map leaves the untuned tower unrelated to the
features; fitting the map on patches embedded by both encoders puts it in v1.5 space at once.
With ``X1 [N, 512]`` the CONCH v1 image embeddings and ``X15 [N, 768]`` the CONCH v1.5
features of the same N patches (same order), the bridge is the ridge solution

    W = argmin_W ||X1 W - X15||^2 + ridge * N * ||W||^2
      = (X1^T X1 + ridge * N * I)^-1 X1^T X15              W: [512, 768]

and a text embedding ``t [512]`` maps to ``t W [768]``. As a ``Linear(512, 768)`` its weight
is ``W^T``; :func:`medvl_engine.training.limit_task._projection_to` composes it with the
tower's own projection into one layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from medvl_engine.data.bags import read_bag_features
from medvl_engine.errors import ConfigError, DataError

__all__ = ["bridge_from_stores", "fit_bridge"]


def fit_bridge(source: torch.Tensor, target: torch.Tensor, ridge: float = 1e-4) -> torch.Tensor:
    """The ridge least-squares map ``W [S, D]`` with ``source [N, S] @ W ~ target [N, D]``.

    ``ridge`` is relative to the mean squared source entry, so it does not depend on the
    embeddings' scale; solved in float64.
    """
    if source.ndim != 2 or target.ndim != 2 or source.shape[0] != target.shape[0]:
        raise ValueError(
            f"bridge needs [N, S] and [N, D] rows of the same patches, got "
            f"{tuple(source.shape)} and {tuple(target.shape)}"
        )
    x = source.to(torch.float64)
    y = target.to(torch.float64)
    gram = x.T @ x
    scale = float(gram.diagonal().mean()) or 1.0
    gram += ridge * scale * torch.eye(gram.shape[0], dtype=torch.float64)
    return torch.linalg.solve(gram, x.T @ y).to(torch.float32)


def bridge_from_stores(
    source_stores: Sequence[str | Path],
    target_stores: Sequence[str | Path],
    ridge: float = 1e-4,
) -> torch.Tensor:
    """:func:`fit_bridge` on feature stores that embed the same patches with two encoders.

    source_stores[k] and target_stores[k] hold the same slide's patches in the same order
    (e.g. ``medvl features --encoder conch-v1`` and ``--encoder conch-v1.5`` on one patch
    grid); rows of all pairs are stacked.
    """
    if not source_stores or len(source_stores) != len(target_stores):
        raise ConfigError(
            "task.bridge_source_features and task.bridge_target_features must list the same "
            "number (at least one) of feature stores, one pair per slide."
        )
    sources, targets = [], []
    for source_path, target_path in zip(source_stores, target_stores, strict=True):
        source, target = read_bag_features(source_path), read_bag_features(target_path)
        if source.shape[0] != target.shape[0]:
            raise DataError(
                f"{source_path} has {source.shape[0]} patches but {target_path} has "
                f"{target.shape[0]}; extract both from the same patch grid.",
                Path(target_path),
            )
        if sources and (source.shape[1], target.shape[1]) != (
            sources[0].shape[1],
            targets[0].shape[1],
        ):
            raise DataError(
                f"{source_path} and {target_path} hold {source.shape[1]}- and "
                f"{target.shape[1]}-wide features, unlike the first pair "
                f"({sources[0].shape[1]}, {targets[0].shape[1]}); give stores of the same "
                "two encoders.",
                Path(source_path),
            )
        sources.append(source)
        targets.append(target)
    source, target = torch.cat(sources), torch.cat(targets)
    if source.shape[0] < source.shape[1]:
        print(
            f"limit: bridge fitted on {source.shape[0]} patches for {source.shape[1]} inputs; "
            "more patches give a better map.",
            flush=True,
        )
    return fit_bridge(source, target, ridge)
