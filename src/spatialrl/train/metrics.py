"""Per-update metrics of the RL trainers and their reduction over processes (``docs/rl.md`` defines
each key): summary statistics, finished episodes, shaped reward components."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from spatialrl.rollout.trajectory import Trajectory


def stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """``prefix/mean|std|min|max`` of a tensor (the reference's reward/value/return summaries)."""
    v = values.double().flatten()
    if v.numel() == 0:
        return {}
    return {f"{prefix}_mean": float(v.mean()), f"{prefix}_std": float(v.std(unbiased=False)),
            f"{prefix}_min": float(v.min()), f"{prefix}_max": float(v.max())}


def episode_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Over the episodes that ended in this update: ``episodes/count``, ``episodes/return_*`` and the
    mean of every numeric field of the env's ``info["episode"]`` (``success`` → success rate; V-IRL's
    ``per_step_accuracy``; TVR's errors and action counts ...) as ``episodes/<field>``."""
    out: dict[str, float] = {"episodes/count": float(len(trajs))}
    if not trajs:
        return out
    out.update(stats("episodes/return", torch.tensor([t.total_reward for t in trajs])))
    out["episodes/length_mean"] = float(np.mean([t.num_turns for t in trajs]))
    out["episodes/cut_rate"] = float(np.mean([t.cut is not None for t in trajs]))
    fields: dict[str, list[float]] = {}
    for t in trajs:
        for k, v in (t.episode or {"success": False}).items():
            if isinstance(v, bool | int | float):
                fields.setdefault(k, []).append(float(v))
    for k, vals in sorted(fields.items()):
        if len(vals) == len(trajs):
            out[f"episodes/{k}"] = float(np.mean(vals))
    return out


def reward_component_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """``rewards/<name>/mean|std``: per-trajectory sums of every numeric ``reward_*`` field of the step
    records (TVR: step, format, progress, terminal), so each shaped component is visible on its own."""
    names = sorted({k for t in trajs for rec in t.turn_records for k, v in rec.items()
                    if k.startswith("reward_") and isinstance(v, int | float) and not isinstance(v, bool)})
    out = {}
    for name in names:
        totals = np.array([sum(float(rec.get(name, 0.0)) for rec in t.turn_records) for t in trajs])
        out[f"rewards/{name[len('reward_'):]}/mean"] = float(totals.mean())
        out[f"rewards/{name[len('reward_'):]}/std"] = float(totals.std())
    return out


def reduce_metrics(accelerator: Any, metrics: dict[str, float], sum_prefixes: tuple[str, ...] = ("charts/",),
                   weights: dict[str, str] | None = None) -> dict[str, float]:
    """Combine every process's metrics into one dict (the same on every process).

    Keys under ``sum_prefixes`` (counters) are summed; keys ending in ``_min`` / ``_max`` take the
    minimum / maximum; every other key is averaged over the processes that reported it — weighted, for
    keys under a prefix in ``weights``, by each process's own value of the named key (PPO: ``episodes/*``
    by ``episodes/count``, since processes finish different numbers of episodes per update).

    Processes may report different keys (one that finished no episode this update has no
    ``episodes/return_mean``), so the key set is agreed first; a plain all-reduce over each process's own
    sorted keys would mix up values or fail on the size mismatch.
    """
    if accelerator.num_processes == 1:
        return metrics
    from accelerate.utils import gather_object

    keys = sorted({k for ks in gather_object([sorted(metrics)]) for k in ks})
    weights = weights or {}

    def weight(key: str) -> float:
        for prefix, by in weights.items():
            if key.startswith(prefix) and key != by and not key.startswith(sum_prefixes):
                return float(metrics.get(by, 0.0))
        return 1.0

    rows = []  # per key: weighted value, weight, value for max, negated value for min
    for k in keys:
        if k in metrics:
            v, w = float(metrics[k]), weight(k)
            rows.append([v * w, w, v, -v])
        else:
            rows.append([0.0, 0.0, -math.inf, -math.inf])
    table = torch.tensor(rows, device=accelerator.device, dtype=torch.float64)
    summed = accelerator.reduce(table[:, :2].contiguous(), reduction="sum").tolist()
    peaks = accelerator.reduce(table[:, 2:].contiguous(), reduction="max").tolist()
    out = {}
    for k, (vw, w), (hi, neg_lo) in zip(keys, summed, peaks, strict=True):
        if k.startswith(sum_prefixes):
            out[k] = vw
        elif k.endswith("_max"):
            out[k] = hi
        elif k.endswith("_min"):
            out[k] = -neg_lo
        elif w > 0:
            out[k] = vw / w
    return out
