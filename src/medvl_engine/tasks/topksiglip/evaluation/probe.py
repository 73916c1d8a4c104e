"""The linear probe on frozen image embeddings (paper Sec. 4.4): fit, AUROC, readout columns."""

from __future__ import annotations

from typing import TypedDict, Unpack

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS
from medvl_engine.data.mammo_reports import DENSITY_LABELS, FINDING_TYPES
from medvl_engine.evaluation.metrics import (
    auroc,
    macro_auroc,
)
from medvl_engine.tasks.topksiglip.evaluation.outputs import MammoEvalOutputs
from medvl_engine.tasks.topksiglip.evaluation.readouts import ReadoutTable, readout_metrics

__all__ = [
    "ProbeSettings",
    "fit_linear_probe",
    "linear_probe_auroc",
    "linear_probe_metrics",
    "probe_readouts",
]


class ProbeSettings(TypedDict, total=False):
    """Training settings of :func:`fit_linear_probe`, passed on by keyword by every probe
    function; one left out takes :func:`fit_linear_probe`'s default."""

    steps: int
    lr: float
    weight_decay: float
    batch_size: int
    eval_every: int
    seed: int


def _probe_scores(probs: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    if num_classes == 2:
        return auroc(labels == 1, probs[:, 1])
    return macro_auroc(labels, probs)


def fit_linear_probe(
    train_x: torch.Tensor,
    train_y: np.ndarray,
    test_x: torch.Tensor,
    num_classes: int,
    steps: int = 20_000,
    lr: float = 4e-3,
    weight_decay: float = 0.01,
    batch_size: int = 32,
    val_x: torch.Tensor | None = None,
    val_y: np.ndarray | None = None,
    eval_every: int = 500,
    seed: int = 0,
) -> np.ndarray:
    """Test class probabilities ``[n_test, num_classes]`` of one linear layer trained on frozen
    embeddings ``[n, C]`` (the paper's probe); the one fit behind every probe figure.

    Class-weighted cross entropy (weights ``n / (num_classes * n_c)``), AdamW on seeded
    minibatches of ``batch_size`` drawn without replacement each pass. With a validation set,
    the weights kept are those of the check (every ``eval_every`` steps and the last) with the
    best validation AUROC; otherwise the last.
    """
    generator = torch.Generator().manual_seed(seed)
    x, y = train_x.float(), torch.as_tensor(np.asarray(train_y), dtype=torch.long)
    layer = torch.nn.Linear(x.shape[1], num_classes)
    with torch.no_grad():
        layer.weight.normal_(0.0, 0.01, generator=generator)
        layer.bias.zero_()
    counts = torch.bincount(y, minlength=num_classes).float()
    weights = torch.where(counts > 0, len(y) / (num_classes * counts.clamp_min(1)), 0.0)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=weight_decay)
    validation = (
        (val_x, val_y)
        if val_x is not None and val_y is not None and len(np.unique(val_y)) > 1
        else None
    )
    best_value, best_state = -1.0, None
    order = torch.randperm(len(y), generator=generator)
    cursor = 0
    for step in range(1, steps + 1):
        if cursor >= len(order):
            order, cursor = torch.randperm(len(y), generator=generator), 0
        chosen = order[cursor : cursor + batch_size]
        cursor += batch_size
        with torch.enable_grad():
            optimizer.zero_grad()
            F.cross_entropy(layer(x[chosen]), y[chosen], weight=weights).backward()
            optimizer.step()
        if validation is not None and (step % eval_every == 0 or step == steps):
            with torch.no_grad():
                probs = torch.softmax(layer(validation[0].float()), -1).numpy()
            value = _probe_scores(probs, np.asarray(validation[1]), num_classes)
            if value > best_value:
                best_value = value
                best_state = {k: v.clone() for k, v in layer.state_dict().items()}
    if best_state is not None:
        layer.load_state_dict(best_state)
    with torch.no_grad():
        return torch.softmax(layer(test_x.float()), -1).numpy()


def linear_probe_auroc(
    train_x: torch.Tensor,
    train_y: np.ndarray,
    test_x: torch.Tensor,
    test_y: np.ndarray,
    num_classes: int,
    *,
    val_x: torch.Tensor | None = None,
    val_y: np.ndarray | None = None,
    **settings: Unpack[ProbeSettings],
) -> float:
    """Test AUROC of :func:`fit_linear_probe` (same arguments, plus ``test_y [n_test]``):
    binary, AUROC of class 1; else macro one-vs-rest over the classes present in ``test_y``."""
    probs = fit_linear_probe(
        train_x, train_y, test_x, num_classes, val_x=val_x, val_y=val_y, **settings
    )
    return _probe_scores(probs, np.asarray(test_y), num_classes)


def _probe_tasks(outputs: MammoEvalOutputs) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """Per probe task: (known mask, class labels, number of classes)."""
    tasks = {
        "birads": (outputs.known("birads"), np.asarray(outputs.birads) - 1, 5),
        "density": (outputs.known("density"), np.asarray(outputs.density), len(DENSITY_LABELS)),
        "cancer": (outputs.known("cancer"), np.asarray(outputs.cancer, dtype=int), 2),
    }
    for i, kind in enumerate(FINDING_TYPES):
        labels = np.asarray(outputs.findings[:, i], dtype=int)
        tasks[kind.replace(" ", "_")] = (outputs.known("findings"), labels, 2)
    return tasks


def linear_probe_metrics(
    train: MammoEvalOutputs,
    val: MammoEvalOutputs | None,
    test: MammoEvalOutputs,
    **settings: Unpack[ProbeSettings],
) -> dict[str, float]:
    """Linear-probe test AUROC per task (``probe_auroc_<task>``; BI-RADS / density macro, with
    their one-vs-rest ``probe_auroc_<task>_<class>``); see :func:`probe_readouts`.

    Each task uses only the breasts with its label in each split; a task is left out when its
    training or test labels hold one class only (binary) or fewer than two classes.
    """
    scores, truth, known, groups = probe_readouts(train, val, test, **settings)
    count = len(test.birads)
    table = ReadoutTable(
        scores,
        truth,
        known,
        groups,
        hits=np.full(count, np.nan),
        chance=np.full(count, np.nan),
        cell_scores=[np.zeros(0)] * count,
        cell_positive=[np.zeros(0)] * count,
        cell_negative=[np.zeros(0)] * count,
    )
    return readout_metrics(table)


def probe_readouts(
    train: MammoEvalOutputs,
    val: MammoEvalOutputs | None,
    test: MammoEvalOutputs,
    **settings: Unpack[ProbeSettings],
) -> tuple[
    dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, list[str]]
]:
    """Linear-probe score columns on the test breasts: ``(scores, truth, known, groups)``.

    Fitted on ``train``, its step chosen on ``val`` (:func:`fit_linear_probe` with
    ``settings``; the embeddings ``[n, C]`` of the breasts labelled for the task). Binary tasks
    give ``probe_auroc_<task>``; BI-RADS and density give one-vs-rest columns
    ``probe_auroc_<task>_<class>`` and the group ``probe_auroc_<task>`` (their mean: the macro
    AUROC over the classes present). A task whose training or test labels hold one class only
    is left out.
    """
    scores: dict[str, np.ndarray] = {}
    truth: dict[str, np.ndarray] = {}
    known: dict[str, np.ndarray] = {}
    groups: dict[str, list[str]] = {}
    train_tasks, test_tasks = _probe_tasks(train), _probe_tasks(test)
    val_tasks = _probe_tasks(val) if val is not None else {}
    for name, (train_known, labels, classes) in train_tasks.items():
        test_known, test_labels, _ = test_tasks[name]
        if len(np.unique(labels[train_known])) < 2 or len(np.unique(test_labels[test_known])) < 2:
            continue
        val_x: torch.Tensor | None = None
        val_y: np.ndarray | None = None
        if val is not None and name in val_tasks:
            val_known, val_labels, _ = val_tasks[name]
            val_x, val_y = val.embeddings[torch.from_numpy(val_known)], val_labels[val_known]
        probs = fit_linear_probe(
            train.embeddings[torch.from_numpy(train_known)],
            labels[train_known],
            test.embeddings,
            classes,
            val_x=val_x,
            val_y=val_y,
            **settings,
        )
        if classes == 2:
            key = f"probe_auroc_{name}"
            scores[key], truth[key], known[key] = probs[:, 1], test_labels == 1, test_known
            continue
        names = ZERO_SHOT_PROMPTS[name][0]
        groups[f"probe_auroc_{name}"] = []
        for c in range(classes):
            key = f"probe_auroc_{name}_{names[c]}"
            scores[key], truth[key], known[key] = probs[:, c], test_labels == c, test_known
            groups[f"probe_auroc_{name}"].append(key)
    return scores, truth, known, groups
