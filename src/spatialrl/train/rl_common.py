"""Small pieces PPO and GRPO share: the run's start (accelerator, seed, output folder, model), the LR
setter, the end of each update (eval, checkpoint, stop) and of the run (final save, export, summary),
task options, deterministic task order and sampling seeds, exact gradient accumulation over a variable
number of micro-batches, and metric reduction.

Determinism without saved RNG state: the tasks a process plays in update ``u`` and the seed of its
sampling generator are functions of ``(seed, rank, u)`` only, so a run resumed from a checkpoint at
update ``u`` draws exactly what the uninterrupted run drew.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spatialrl.agents.vision_cache import VisionCache
from spatialrl.rollout.trajectory import Trajectory


def start_run(cfg: Any, micro_batch: int) -> tuple[Any, Path]:
    """``(accelerator, output_dir)`` for a PPO/GRPO config: the accelerator (``micro_batch`` samples per
    forward), global seeds, the output folder with ``config.json`` (main process), and the refusal of
    sharded rollouts."""
    from spatialrl.io import atomic_write_json
    from spatialrl.train.common import make_accelerator, seed_everything
    from spatialrl.train.config import config_to_dict

    accelerator = make_accelerator(cfg.model.dtype, 1, micro_batch, cfg.optim.max_grad_norm)
    seed_everything(cfg.seed)
    out = Path(cfg.output_dir)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "config.json", config_to_dict(cfg))
    refuse_sharded_rollouts(accelerator)
    return accelerator, out


def load_policy_model(cfg: Any, prebuilt: tuple[Any, Any] | None) -> tuple[Any, Any, dict[str, Any]]:
    """``(model, processor, meta)`` from ``cfg.model``, or the caller's ``prebuilt`` pair (the speed
    benchmark's random 11B-sized model, never written to disk)."""
    if prebuilt is not None:
        return prebuilt[0], prebuilt[1], {"source": "prebuilt"}
    from spatialrl.train.common import load_model_and_processor

    return load_model_and_processor(cfg.model, cfg.seed)


def lr_setter(optimizer: torch.optim.Optimizer, optim_cfg: Any, period: int) -> Callable[[int], float]:
    """``set_lr(done)``: sets and returns the LR after ``done`` of ``period`` schedule steps (warmup +
    cosine/linear/constant from ``optim_cfg``) — a function of the step count, so nothing to checkpoint."""
    from spatialrl.train.common import lr_multiplier

    def set_lr(done: int) -> float:
        lr = optim_cfg.lr * lr_multiplier(done / period, optim_cfg.schedule, optim_cfg.warmup_ratio,
                                          optim_cfg.min_lr_ratio, 1.0 / period)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    return set_lr


def make_optimizer(accelerator: Any, params: list[torch.nn.Parameter], cfg: Any) -> torch.optim.Optimizer:
    """AdamW over ``params`` from ``cfg.optim``; in CPU memory when ``cfg.optimizer_offload``."""
    from accelerate.utils import DistributedType

    o = cfg.optim
    kwargs = dict(lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay)
    if not cfg.optimizer_offload:
        return torch.optim.AdamW(params, **kwargs)
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        from spatialrl.errors import DataError

        raise DataError("optimizer_offload: not with DeepSpeed, which offloads itself "
                        "(use configs/accelerate/zero2_offload_*.yaml and optimizer_offload=false)")
    from spatialrl.train.offload import CPUOffloadAdamW

    return CPUOffloadAdamW(params, master_weights=cfg.offload_master_weights, **kwargs)


def finish_update(update: int, cfg: Any, accelerator: Any, model: Any, processor: Any, tracker: Any,
                  save: Callable[[int], None], stop_after: int | None, t_start: float) -> bool:
    """The bookkeeping after update ``update`` is counted and its metrics logged; True means stop now.

    In this order: closed-loop eval every ``cfg.eval.every`` updates, then a checkpoint every
    ``cfg.checkpoint.every`` (neither at the last update: ``end_run`` saves and evaluates that one);
    ``stop_after`` stops as if the process were killed, without saving (how the tests check exact
    resume); the time limit saves first, so the run resumes from this update.
    """
    from spatialrl.train.sft import closed_loop_eval

    if cfg.eval.task is not None and cfg.eval.every > 0 and update % cfg.eval.every == 0 and update < cfg.updates:
        tracker.log(update, closed_loop_eval(accelerator, model, processor, cfg, update))
    if cfg.checkpoint.every > 0 and update % cfg.checkpoint.every == 0 and update < cfg.updates:
        save(update)
    if stop_after is not None and update >= stop_after:
        return True
    if cfg.time_limit_minutes > 0 and (time.perf_counter() - t_start) / 60 >= cfg.time_limit_minutes:
        save(update)
        return True
    return False


def end_run(cfg: Any, accelerator: Any, model: Any, processor: Any, tracker: Any, out: Path,
            save: Callable[[int], None], *, update: int, last: dict[str, float], t_start: float,
            stopped_early: bool, meta: dict[str, Any],
            export_extra: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """The run's summary (``seconds``: the time until the loop ended, final save not counted).

    Unless ``finish_update`` stopped the run early: a last checkpoint, the model exported to
    ``OUTPUT/final`` (``meta`` plus update count and recipe beside it), ``export_extra(OUTPUT/final)`` on
    the main process (PPO: the value head), the final closed-loop eval, and ``OUTPUT/summary.json``.
    """
    from spatialrl.io import atomic_write_json
    from spatialrl.train.common import save_hf_model
    from spatialrl.train.config import config_to_dict
    from spatialrl.train.sft import closed_loop_eval

    summary: dict[str, Any] = {"update": update, "updates": cfg.updates, "finished": update >= cfg.updates,
                               "last": last, "seconds": time.perf_counter() - t_start}
    if not stopped_early:
        save(update)
        save_hf_model(accelerator, model, processor, out / "final", merge_lora=cfg.model.lora.merge_on_save,
                      dtype=cfg.model.save_dtype, meta={**meta, "updates": update, "recipe": config_to_dict(cfg)})
        if export_extra is not None and accelerator.is_main_process:
            export_extra(out / "final")
        final = closed_loop_eval(accelerator, model, processor, cfg, update)
        if final:
            tracker.log(update, final)
        summary["final"] = final
        if accelerator.is_main_process:
            atomic_write_json(out / "summary.json", summary)
    tracker.close()
    accelerator.wait_for_everyone()
    return summary


def refuse_sharded_rollouts(accelerator: Any) -> None:
    """Stop before training when FSDP shards the policy over several processes.

    Rollouts and scoring run a different number of forward passes on each process (episodes end at
    different turns, answers stop at different lengths, sequence counts differ), and every FSDP forward
    all-gathers the parameters, so the processes would wait on each other forever. DDP and DeepSpeed
    ZeRO-2 keep whole weights on every process (their forwards need no collective); FSDP on one process
    is fine.
    """
    from spatialrl.errors import DataError
    from spatialrl.train.common import is_fsdp

    if accelerator.num_processes > 1 and is_fsdp(accelerator):
        raise DataError("accelerate config: FSDP over several processes is not supported by the RL trainers "
                        "(per-process rollouts run unequal numbers of forwards and FSDP's all-gathers would "
                        "deadlock); use configs/accelerate/ddp_*gpu.yaml or zero2_*gpu.yaml")


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
    import os

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


def rollout_vision_cache(model: Any, sampling_cfg: Any) -> VisionCache | None:
    """A fresh image-feature cache for one update (weights are fixed within its rollouts and scoring), or
    None when it is off or the model family is not supported (``agents/vision_cache.py``)."""
    if sampling_cfg.vision_cache_mb <= 0 or not VisionCache.supports(model):
        return None
    return VisionCache(sampling_cfg.vision_cache_mb)


def scoring_vision(cache: VisionCache | None, model: Any, unwrapped: Any) -> tuple[VisionCache, Any] | None:
    """``(cache, unwrapped)`` for the old-log-prob and training forwards, or None for both.

    Both passes must get image features the same way: a cached feature (encoded in a rollout batch) and
    one recomputed in another batch differ in bf16 on a GPU, which would show up as ratio drift. The
    training forward can take cached features only when the vision tower is frozen and the model is not
    wrapped (DDP/DeepSpeed input scattering is not known to carry transformers' encoder-output objects).
    """
    if cache is None or model is not unwrapped or VisionCache.tower_trainable(unwrapped):
        return None
    return cache, unwrapped


def vision_cache_metrics(cache: VisionCache | None) -> dict[str, float]:
    """``charts/images_encoded`` and ``charts/images_cached`` of one update's rollouts."""
    if cache is None:
        return {}
    return {"charts/images_encoded": float(cache.misses), "charts/images_cached": float(cache.hits)}


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


def begin_accumulation(accelerator: Any, n_micro: int) -> None:
    """Make the next ``n_micro`` ``accelerator.accumulate`` blocks one optimiser step: gradients sync and
    the optimiser steps after the last one (``accelerate`` counts blocks in ``accelerator.step``)."""
    accelerator.gradient_accumulation_steps = n_micro
    accelerator.step = 0


def backward_scaled(accelerator: Any, loss: torch.Tensor, n_micro: int) -> None:
    """Backward of a loss already normalised over the whole optimiser step. ``accelerate`` divides by its
    accumulation count outside DeepSpeed (undone here); DeepSpeed divides by its own configured count,
    which our accelerators keep at 1."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        accelerator.backward(loss)
    else:
        accelerator.backward(loss * n_micro)


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
