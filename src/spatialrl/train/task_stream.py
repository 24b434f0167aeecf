"""What each process plays: a training task's episodes, its share of one endless episode stream, and the
seed of its sampling generator in each update.

Determinism without saved RNG state: the tasks a process plays in update ``u`` and the seed of its
sampling generator are functions of ``(seed, rank, u)`` only, so a run resumed from a checkpoint at
update ``u`` draws exactly what the uninterrupted run drew.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def task_options(suite: Any, task_cfg: Any) -> dict[str, Any]:
    """The suite's options for a training task, built like ``spatialrl eval`` builds them."""
    options = dict(suite.default_options)
    if task_cfg.data is not None:
        options["data"] = task_cfg.data
    if task_cfg.split is not None:
        options["split"] = task_cfg.split
    options.update(task_cfg.options)
    return options


def env_threads(task_cfg: Any) -> int:
    """``task.env_threads``, with 0 meaning one per CPU core."""
    return task_cfg.env_threads if task_cfg.env_threads > 0 else (os.cpu_count() or 1)


def task_episodes(task_cfg: Any, extra_options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any], list[Any]]:
    """The suite, its options and the episodes a training task plays (``limit`` applied); one clear
    error when the split/options select none."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.errors import DataError

    suite = get_suite(task_cfg.name)
    options = {**task_options(suite, task_cfg), **(extra_options or {})}
    episodes = suite.episodes(options)
    if task_cfg.limit > 0:
        episodes = episodes[: task_cfg.limit]
    if not episodes:
        raise DataError(f"task {task_cfg.name}: no episodes in this split/options")
    return suite, options, episodes


def episode_sampler(n: int, seed: int, rank: int, world: int = 1) -> Callable[[int, int], list[int]]:
    """``take(start, count)``: items ``start .. start+count-1`` of this process's share of one endless
    stream of indices into ``n`` items — epoch after epoch, each a permutation fixed by ``(seed, epoch)``.

    The stream is dealt round-robin: item ``k`` of process ``rank`` is stream position ``k·world + rank``.
    So ``world`` processes that each take ``count`` items per update together take exactly the block one
    process taking ``world·count`` would take: the same global batch of tasks at any process count (no
    task twice in an update, every task once per epoch), and a single process draws what it always drew.
    """
    if n < 1:
        raise ValueError("episode_sampler needs at least one item")
    if not 0 <= rank < world:
        raise ValueError(f"episode_sampler: rank {rank} outside a world of {world}")

    def take(start: int, count: int) -> list[int]:
        out = []
        for k in range(start, start + count):
            epoch, pos = divmod(k * world + rank, n)
            # (0 in the seed keeps the stream a single process drew before the stream was shared)
            out.append(int(np.random.default_rng([seed, 0, epoch]).permutation(n)[pos]))
        return out

    return take


def rollout_generator(seed: int, rank: int, update: int, device: str | torch.device = "cpu") -> torch.Generator:
    """The sampling generator of one process in one update (seeded from ``(seed, rank, update)``)."""
    g = torch.Generator(device=device)
    g.manual_seed(int(np.random.default_rng([seed, rank, update]).integers(2**62)))
    return g
