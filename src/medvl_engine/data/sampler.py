"""Organ-stratified bags: an anchor slide plus N negatives, drawn within its organ or at random."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

import numpy as np

from medvl_engine.errors import ConfigError, DataError

__all__ = ["OrganStratifiedSampler"]


class OrganStratifiedSampler:
    """Bags of slide indices ``[anchor, neg_1, ..., neg_N]`` for LIMIT's contrastive loss.

    Each epoch visits every slide once as an anchor, in an order shuffled by
    ``(seed, epoch)``. ``negatives="same_organ"`` draws the N negatives without replacement
    among the other slides of the anchor's organ; when the organ has fewer than N other
    slides, the bag is topped up from other organs (counted in ``last_topped_up``) so that every
    bag has K = N + 1 entries. ``negatives="random"`` draws them from all other slides.
    Bags depend only on (seed, epoch), never on global RNG state.
    """

    def __init__(
        self,
        organs: Sequence[str],
        num_negatives: int = 4,
        negatives: Literal["same_organ", "random"] = "same_organ",
        seed: int = 0,
    ) -> None:
        if not 1 <= num_negatives <= 8:
            raise ConfigError(f"num_negatives must be in 1..8, got {num_negatives}.")
        if negatives not in ("same_organ", "random"):
            raise ConfigError(f"negatives must be 'same_organ' or 'random', got {negatives!r}.")
        if len(organs) < num_negatives + 1:
            raise DataError(
                f"{len(organs)} training slides cannot make bags of {num_negatives + 1}; add "
                "slides or lower num_negatives."
            )
        self.organs = [str(o) for o in organs]
        self.num_negatives = num_negatives
        self.negatives = negatives
        self.seed = seed
        self.last_topped_up = 0
        members: dict[str, list[int]] = defaultdict(list)
        for index, organ in enumerate(self.organs):
            members[organ].append(index)
        self._members = {organ: np.asarray(ids) for organ, ids in members.items()}

    def __len__(self) -> int:
        return len(self.organs)

    def bags(self, epoch: int) -> list[list[int]]:
        """All bags of ``epoch``: one per slide, anchor first."""
        rng = np.random.default_rng([self.seed, epoch])
        everyone = np.arange(len(self.organs))
        result, topped_up = [], 0
        for anchor in rng.permutation(len(self.organs)):
            anchor = int(anchor)
            if self.negatives == "same_organ":
                pool = self._members[self.organs[anchor]]
                pool = pool[pool != anchor]
                take = min(self.num_negatives, len(pool))
                chosen = list(rng.choice(pool, size=take, replace=False)) if take else []
                if take < self.num_negatives:
                    topped_up += 1
                    others = np.setdiff1d(everyone, np.asarray([anchor, *chosen]))
                    extra = rng.choice(others, size=self.num_negatives - take, replace=False)
                    chosen += list(extra)
            else:
                pool = everyone[everyone != anchor]
                chosen = list(rng.choice(pool, size=self.num_negatives, replace=False))
            result.append([anchor, *(int(i) for i in chosen)])
        self.last_topped_up = topped_up
        return result
