"""Paired comparison of two runs on the same episodes: which episodes each solved, and a bootstrap interval
of the difference in successes.

Two agents evaluated on one set of episodes are compared per episode, not as two independent rates: the
same hard episodes defeat both, so the paired interval is much narrower than the difference of two
separate intervals (McNemar's setting; the bootstrap resamples episode indices, both runs together). This is
how each shipped built-in model is compared with the one it replaced (docs/results/builtin/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Paired:
    episodes: int  # episodes both runs finished (ids in common; errored episodes left out)
    a: int  # successes of run A on them
    b: int
    both: int
    only_a: int
    only_b: int
    low: float  # bootstrap interval of (A − B) successes, in episodes
    high: float
    level: float


def successes(episodes: list[dict[str, Any]]) -> dict[str, bool]:
    """episode id → success, for the episodes that ended without an error and record a success."""
    return {str(e["episode_id"]): bool(e["success"]) for e in episodes
            if e.get("error") is None and "success" in e and "episode_id" in e}


def paired_comparison(a: dict[str, bool], b: dict[str, bool], resamples: int = 10_000, level: float = 0.95,
                      seed: int = 0) -> Paired | None:
    """A against B on the episodes both have (``successes`` of each run); None when they share none."""
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    x = np.array([a[i] for i in ids], dtype=bool)
    y = np.array([b[i] for i in ids], dtype=bool)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(ids), size=(resamples, len(ids)))
    diff = x[draws].sum(axis=1).astype(np.int64) - y[draws].sum(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(diff, [tail, 100 - tail])
    return Paired(episodes=len(ids), a=int(x.sum()), b=int(y.sum()), both=int((x & y).sum()),
                  only_a=int((x & ~y).sum()), only_b=int((~x & y).sum()), low=float(low), high=float(high),
                  level=level)
