"""Gradient accumulation over a variable number of micro-batches, through accelerate's public API.

An optimiser step is made of ``n`` forward/backward passes: the first ``n − 1`` run under
``accelerator.no_sync`` with ``accelerator.sync_gradients`` off (DDP skips its all-reduce, DeepSpeed
accumulates without stepping, the prepared optimiser ignores ``step``/``zero_grad``), the last one syncs
and steps. Losses are normalised over the whole optimiser step by the caller: every accelerator is built
with ``gradient_accumulation_steps=1``, so ``accelerator.backward`` divides by nothing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


@contextlib.contextmanager
def micro_step(accelerator: Any, model: Any, last: bool) -> Iterator[None]:
    """One forward/backward pass of an optimiser step: gradients stay local until the ``last`` pass."""
    accelerator.sync_gradients = last
    try:
        with contextlib.nullcontext() if last else accelerator.no_sync(model):
            yield
    finally:
        accelerator.sync_gradients = True


@dataclass(frozen=True)
class MicroBatch:
    """Indices of the local items in one forward pass; ``weight`` 0 marks a filler pass (a process with
    fewer items still joins every collective of the optimiser step, contributing zero gradient)."""

    indices: tuple[int, ...]
    weight: float


def micro_batch_plan(accelerator: Any, n_items: int, micro: int) -> list[MicroBatch]:
    """Split ``n_items`` into micro-batches of ``micro``; pad with fillers to the largest count of any
    process, since every process must run the same number of backward passes per optimiser step."""
    local = math.ceil(n_items / micro) if n_items else 0
    count = int(accelerator.reduce(torch.tensor(local, device=accelerator.device), reduction="max").item()) \
        if accelerator.num_processes > 1 else local
    count = max(count, 1)
    plan = [MicroBatch(tuple(range(i * micro, min(n_items, (i + 1) * micro))), 1.0) for i in range(local)]
    plan += [MicroBatch((), 0.0)] * (count - local)
    return plan
