"""Exponential moving average of a model's weights, evaluated and saved in its place.

After optimiser step t (1-based) every trained parameter and floating-point buffer becomes

    theta_bar <- d_t * theta_bar + (1 - d_t) * theta,    d_t = min(decay, (1 + t) / (10 + t))

starting from the weights training starts with. The warm-up of d_t keeps the first steps from
dragging the initial weights along for hundreds of steps. Frozen parameters are never changed
by training and are kept as they are; integer buffers (BatchNorm's batch count) are copied.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

__all__ = ["WeightAverage", "average_decay"]


def average_decay(step: int, decay: float) -> float:
    """d_t of optimiser step ``step`` (1-based): ``min(decay, (1 + t) / (10 + t))``."""
    return min(decay, (1.0 + step) / (10.0 + step))


class WeightAverage:
    """A frozen copy of ``model`` holding the moving average of its weights (see module)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must lie in (0, 1), got {decay}")
        self.decay = decay
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self._pairs = [
            (average, trained)
            for average, trained in zip(self.model.parameters(), model.parameters(), strict=True)
            if trained.requires_grad
        ]
        self._buffers = list(zip(self.model.buffers(), model.buffers(), strict=True))

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Fold the trained model's current weights in after optimiser step ``step``."""
        weight = 1.0 - average_decay(step, self.decay)
        if self._pairs:
            averages: list[torch.Tensor] = [average for average, _ in self._pairs]
            trained = [value.detach().to(average.dtype) for average, value in self._pairs]
            torch._foreach_lerp_(averages, trained, weight)
        for average, value in self._buffers:
            if average.is_floating_point():
                average.lerp_(value.to(average.dtype), weight)
            else:
                average.copy_(value)

    def state_dict(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)
