"""A least-squares bridge from one encoder's embedding space to another's (Conch-Z).

The Conch-Z recipe tunes CONCH v1's text tower (joint space, 512) over CONCH v1.5 patch
features (768). A random ``512 -> 768`` map leaves the untuned tower unrelated to the
features; fitting the map on patches embedded by both encoders puts it in v1.5 space at once.
With ``X1 [N, 512]`` the CONCH v1 image embeddings and ``X15 [N, 768]`` the CONCH v1.5
features of the same N patches (same order), the bridge is the ridge solution

    W = argmin_W ||X1 W - X15||^2 + ridge * N * ||W||^2
      = (X1^T X1 + ridge * N * I)^-1 X1^T X15              W: [512, 768]

and a text embedding ``t [512]`` maps to ``t W [768]``. As a ``Linear(512, 768)`` its weight
is ``W^T``; :func:`medvl_engine.tasks.limit.tower.projection_to` composes it with the
tower's own projection into one layer.

``medvl-train limit bridge`` fits the map once and writes it to a file
(:func:`write_bridge_file`: safetensors, tensor ``bridge`` plus the names and content hashes of
the stores it came from); ``task.bridge_init=file`` with ``task.bridge_file`` loads it
(:func:`read_bridge_file`) instead of refitting when the model is built.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from medvl_engine.errors import ConfigError, DataError
from medvl_engine.features.bags import read_bag_features

if TYPE_CHECKING:
    from medvl_engine.tasks.limit.config import LimitTaskConfig
    from medvl_engine.training.config import RunConfig

__all__ = [
    "bridge_action",
    "bridge_from_stores",
    "fit_bridge",
    "read_bridge_file",
    "write_bridge_file",
]


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
    bridge: torch.Tensor = torch.linalg.solve(gram, x.T @ y).to(torch.float32)
    return bridge


def bridge_from_stores(
    source_stores: Sequence[str | Path],
    target_stores: Sequence[str | Path],
    ridge: float = 1e-4,
    provenance: list[dict[str, str]] | None = None,
) -> torch.Tensor:
    """:func:`fit_bridge` on feature stores that embed the same patches with two encoders.

    source_stores[k] and target_stores[k] hold the same slide's patches in the same order
    (e.g. ``medvl features --encoder conch-v1`` and ``--encoder conch-v1.5`` on one patch
    grid); rows of all pairs are stacked. ``provenance``, when given, receives one entry per
    store pair: names and sha256 of the features read.
    """
    if not source_stores or len(source_stores) != len(target_stores):
        raise ConfigError(
            "task.bridge_source_features and task.bridge_target_features must list the same "
            "number (at least one) of feature stores, one pair per slide."
        )
    sources: list[torch.Tensor] = []
    targets: list[torch.Tensor] = []
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
        if provenance is not None:
            provenance.append(
                {
                    "source": str(source_path),
                    "source_sha256": _content_hash(source),
                    "target": str(target_path),
                    "target_sha256": _content_hash(target),
                }
            )
    source, target = torch.cat(sources), torch.cat(targets)
    if source.shape[0] < source.shape[1]:
        print(
            f"limit: bridge fitted on {source.shape[0]} patches for {source.shape[1]} inputs; "
            "more patches give a better map.",
            flush=True,
        )
    return fit_bridge(source, target, ridge)


def _content_hash(features: torch.Tensor) -> str:
    return hashlib.sha256(features.contiguous().numpy().tobytes()).hexdigest()


def write_bridge_file(
    path: str | Path,
    source_stores: Sequence[str | Path],
    target_stores: Sequence[str | Path],
    ridge: float = 1e-4,
) -> tuple[Path, torch.Tensor]:
    """Fit the bridge from the store pairs and write it to ``path`` atomically.

    The safetensors file holds ``bridge [S, D]``; its metadata records the ridge, the number
    of patches and, per store pair, the store names and sha256 of their features.
    """
    from safetensors.torch import save_file

    from medvl_engine.common.atomic import atomic_write

    provenance: list[dict[str, str]] = []
    bridge = bridge_from_stores(source_stores, target_stores, ridge, provenance)
    patches = sum(read_bag_features(p).shape[0] for p in source_stores)
    metadata = {
        "format": "medvl-limit-bridge",
        "ridge": repr(float(ridge)),
        "patches": str(patches),
        "stores": json.dumps(provenance),
    }
    path = Path(path)
    atomic_write(
        path,
        lambda temporary: save_file({"bridge": bridge.contiguous()}, str(temporary), metadata),
        what="bridge map",
    )
    return path, bridge


def read_bridge_file(path: str | Path) -> tuple[torch.Tensor, dict[str, str]]:
    """The ``bridge [S, D]`` of a file written by :func:`write_bridge_file` and its metadata."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"task.bridge_file {path} does not exist; write it first with "
            "`medvl-train limit bridge --config ...`."
        )
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            if metadata.get("format") != "medvl-limit-bridge" or "bridge" not in handle.keys():
                raise ConfigError(
                    f"{path} is not a bridge map written by `medvl-train limit bridge`; "
                    "write it again with that command."
                )
            bridge = handle.get_tensor("bridge")
    except (SafetensorError, OSError, ValueError) as error:
        raise ConfigError(
            f"{path} is damaged or not a safetensors file; write it again with "
            "`medvl-train limit bridge`."
        ) from error
    if bridge.ndim != 2:
        raise ConfigError(f"{path} holds a {bridge.ndim}-d bridge, not a [S, D] map.")
    return bridge.float(), metadata


def bridge_action(run_config: RunConfig, task_config: LimitTaskConfig) -> int:
    """``medvl-train limit bridge``: fit the least-squares bridge from the paired stores of
    task.bridge_source_features / task.bridge_target_features and write it to
    task.bridge_file (default ``<run.out_dir>/bridge.safetensors``)."""
    target = task_config.bridge_file
    if not target:
        Path(run_config.out_dir).mkdir(parents=True, exist_ok=True)
        target = str(Path(run_config.out_dir) / "bridge.safetensors")
    path, bridge = write_bridge_file(
        target,
        task_config.bridge_source_features or [],
        task_config.bridge_target_features or [],
        task_config.bridge_ridge,
    )
    print(
        f"wrote the {bridge.shape[0]} -> {bridge.shape[1]} bridge map to {path}; train with "
        f"task.bridge_init=file task.bridge_file={path}",
        flush=True,
    )
    return 0
