"""Where an RL update's training time goes: torch.profiler over one update's scoring and training passes.

``profile_update: K`` (PPO and GRPO configs; 0 = off) wraps update K's scoring pass and its epochs (not the
rollout: ``benchmarks/decode_speed.py --profile`` covers decoding) in ``torch.profiler.profile`` and writes,
beside the run's metrics:

* ``profile-update-K.json``: the window's wall seconds; on a GPU the summed kernel time (``busy_seconds``)
  and its share of the wall clock, the kernel count, the kernel time by kind (matmul, attention,
  elementwise, ...), the top kernels, and the host's own operator time (``host_op_seconds``: close to
  the wall clock while the kernels' share is low means the card waits on launches); on a CPU the same
  over operators' self CPU time;
* ``profile-update-K.txt``: torch's own operator table (top 40 by self device or CPU time).

Why: the 8.3B's PPO epochs run at ~23% of the card's matmul rate (docs/rl.md, issue 24), and the throughput
figures alone cannot say whether the rest is small kernels, attention, copies or the host. The profiled
update runs slower than the others (the profiler's overhead), so its own ``train/update_seconds`` is not a
speed figure; ``benchmarks/rl_speed.py --profile`` profiles the update before the one it reports.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from spatialrl.io import atomic_write_json

# Kernel or operator name fragments → kind; first match wins, so the specific kinds come first.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient_attention")),
    ("matmul", ("gemm", "matmul", "xmma", "nvjet", "cutlass", "aten::mm", "aten::addmm", "aten::bmm",
                "aten::linear", "splitk")),
    ("norm", ("norm",)),
    ("softmax / log-prob", ("softmax", "logsumexp", "cross_entropy", "nll_loss", "gather")),
    ("copy / cast", ("copy", "memcpy", "memset", "cat", "convert", "to_copy", "contiguous", "index")),
    ("reduce", ("reduce", "sum", "mean", "amax", "max")),
    ("optimizer", ("adam", "foreach", "multi_tensor")),
    ("elementwise", ("elementwise", "vectorized", "mul", "add", "silu", "gelu", "exp", "neg", "where",
                     "pow", "sqrt", "div", "sub", "fill")),
)
TOP = 30


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, parts in KINDS:
        if any(p in low for p in parts):
            return kind
    return "other"


def summarise(averages: Any, wall_seconds: float, on_device: bool) -> dict[str, Any]:
    """The JSON summary of ``prof.key_averages()``: device kernels on a GPU, CPU operators' self time else."""
    rows = []
    for evt in averages:
        if on_device:
            if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
                continue
            us = float(getattr(evt, "self_device_time_total", 0.0))
        else:
            us = float(evt.self_cpu_time_total)
        if us > 0:
            rows.append((evt.key, kind_of(evt.key), int(evt.count), us / 1e6))
    rows.sort(key=lambda r: -r[3])
    # on a GPU, the host's own operator time beside the kernels': near the wall clock = launch-bound
    host = sum(float(e.self_cpu_time_total) for e in averages
               if getattr(e, "device_type", None) == torch.autograd.DeviceType.CPU) / 1e6
    by_kind: dict[str, float] = {}
    for _, kind, _, seconds in rows:
        by_kind[kind] = by_kind.get(kind, 0.0) + seconds
    busy = sum(r[3] for r in rows)
    return {
        "timed": "device kernels" if on_device else "CPU operators (self time)",
        "wall_seconds": wall_seconds, "busy_seconds": busy,
        # kernels of several streams can overlap, so on a GPU this is an upper bound on the busy share
        "busy_share": busy / wall_seconds if wall_seconds > 0 else None,
        "calls": sum(r[2] for r in rows),
        "host_op_seconds": host,
        "by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "top": [{"name": n[:160], "kind": k, "calls": c, "seconds": s} for n, k, c, s in rows[:TOP]],
    }


@contextmanager
def profile_window(enabled: bool, out_dir: Path, update: int, device: torch.device,
                   is_main: bool = True) -> Iterator[None]:
    """Profile the block when ``enabled`` and write ``profile-update-<update>.{json,txt}`` into ``out_dir``
    (main process only; every process runs the profiler so they stay in step)."""
    if not enabled:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    on_device = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    if on_device:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        yield
        if on_device:
            torch.cuda.synchronize(device)
    wall = time.perf_counter() - t0
    if not is_main:
        return
    averages = prof.key_averages()
    summary = {"update": update, **summarise(averages, wall, on_device)}
    atomic_write_json(out_dir / f"profile-update-{update}.json", summary)
    sort = "self_device_time_total" if on_device else "self_cpu_time_total"
    (out_dir / f"profile-update-{update}.txt").write_text(averages.table(sort_by=sort, row_limit=40) + "\n")
