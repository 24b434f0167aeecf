"""GRPO, single-turn (per-step expert prompts) and multi-turn (live rollouts), readable top to bottom.

    spatialrl train grpo configs/grpo/tiny_cpu.yaml --mode multi
    accelerate launch --config_file configs/accelerate/zero2.yaml \\
        -m spatialrl.cli train grpo configs/grpo/tvr_multi_small.yaml           # N GPUs, DeepSpeed ZeRO-2

What one update does (``spec/training.md``, TVRBench appendix D):

1. **Rollout.** *multi*: take ``tasks_per_update`` tasks on this process and play each ``group_size``
   times from the same start (same seed and options) in lock-step env slots, sampling every turn
   from the token stream so far (:mod:`spatialrl.rollout.agent_loop`); a trajectory's return is the sum
   of its step rewards (TVR: the shaped reward, every component logged). *single*: take
   ``single.prompts_per_update`` per-step expert prompts and sample ``group_size`` answers each; the
   gated reward scores format and action match.
2. **Advantages.** A_i = (R_i − mean_g R) / (std_g R + 1e-6) within each group g (one task / prompt),
   broadcast to every policy token of the trajectory; env and prompt tokens carry no loss. Options:
   drop zero-variance groups; pose-anchored step groups (A += w · step advantage, GiGPO).
3. **Old and reference log-probs** of every policy token in one no-grad pass each.
4. **Update**: ``epochs`` × ``mini_batches`` optimiser steps, each over micro-batches of
   ``micro_batch_size`` sequences:

       ρ_t = exp(log π(a_t) − log π_old(a_t))
       L = agg_t[ −min(ρ_t A_t, clip(ρ_t, 1 ± ε) A_t) + β k3(π, π_ref)_t − c_H H_t ]

   ``agg`` is ``loss_agg`` (token-mean by default), reduced exactly over the whole mini-batch and
   every process. Gradient clipping 1.0, AdamW, cosine LR.
5. Log, maybe evaluate closed-loop, checkpoint (model, optimizer, RNG: resumes exactly).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.errors import DataError
from spatialrl.rollout.agent_loop import EnvPool
from spatialrl.rollout.trajectory import Segment, Trajectory, TurnTokenizer
from spatialrl.train import losses
from spatialrl.train.accumulation import micro_batch_plan
from spatialrl.train.common import prepare_trainable, scoring_mode
from spatialrl.train.expert_states import (
    ExpertPrompt,
    action_match,
    expert_prompts,
    gated_reward,
    heldout_prompts,
)
from spatialrl.train.merged_rollout import merged_rollout, rollout_model
from spatialrl.train.metrics import episode_metrics, reduce_metrics, reward_component_metrics
from spatialrl.train.policy_ops import collate_inputs, sample_segments, score_tokens
from spatialrl.train.profiling import profile_window
from spatialrl.train.rl_common import adopt_model_image_sizes, answer_metrics
from spatialrl.train.rl_config import GatedRewardConfig, GRPOConfig
from spatialrl.train.run import Run
from spatialrl.train.task_stream import env_threads, episode_sampler, rollout_generator, task_episodes
from spatialrl.train.vision_cache_policy import rollout_vision_cache, scoring_vision, vision_cache_metrics


# ------------------------------------------------------------------------------------------ rollouts
def rollout_multi(pool: EnvPool, specs: list[Any], group_size: int, update: int, model: Any,
                  sampling: SamplingParams, generator: torch.Generator, max_batch_size: int | None,
                  vision_cache: Any = None, kv_cache: str = "dynamic") -> list[Trajectory]:
    """Play every task ``group_size`` times in lock-step; return all trajectories (grouped by task)."""
    pool.start_many([(k * group_size + j, spec, f"{update}:{k}:{spec.episode_id}")
                     for k, spec in enumerate(specs) for j in range(group_size)])
    done: list[Trajectory] = []
    while pool.active():
        _, finished = pool.turn(model, sampling, generator, max_batch_size=max_batch_size, vision_cache=vision_cache,
                                kv_cache=kv_cache)
        done.extend(finished)
    order = {id(t): i for i, t in enumerate(done)}
    return sorted(done, key=lambda t: (t.group, order[id(t)]))


def rollout_single(turns: TurnTokenizer, prompts: list[ExpertPrompt], group_size: int, update: int, model: Any,
                   sampling: SamplingParams, generator: torch.Generator, reward_cfg: GatedRewardConfig,
                   max_batch_size: int | None, vision_cache: Any = None, kv_cache: str = "dynamic") -> list[Trajectory]:
    """Sample ``group_size`` answers to each prompt; each answer is a one-turn trajectory."""
    bases = [turns.start(p.conversation) for p in prompts]
    segments = [base.fork() for base in bases for _ in range(group_size)]
    samples = sample_segments(model, turns, segments, sampling, generator, max_batch_size=max_batch_size,
                              vision_cache=vision_cache, kv_cache=kv_cache)
    out = []
    for i, (seg, (ids, logprobs)) in enumerate(zip(segments, samples, strict=True)):
        prompt = prompts[i // group_size]
        turns.add_policy(seg, ids, logprobs, turn=0)
        text = turns.tokenizer.decode(ids, skip_special_tokens=True)
        reward, parts = gated_reward(text, prompt.expert_response, reward_cfg)
        out.append(Trajectory(
            episode_id=f"{prompt.episode_id}#{i % group_size}", group=f"{update}:{i // group_size}",
            category=prompt.category, segments=[seg], turn_segment=[0], turn_rewards=[reward],
            turn_records=[{f"reward_{k}": v for k, v in parts.items()}], responses=[text],
            episode={"success": bool(parts["match"])}, done=True))
    return out


# ------------------------------------------------------------------------------------------ advantages
def trajectory_advantages(trajs: list[Trajectory], cfg: GRPOConfig) -> tuple[list[list[float]], torch.Tensor]:
    """Per-turn advantages of every trajectory, and the zero-variance flag of each trajectory's group.

    Base: the group-relative advantage of the trajectory return, the same for all its turns. With
    ``pose_anchored``: plus ``step_weight`` × the step-group advantage of each turn's discounted return,
    where a step group is every turn (across the task's G trajectories) taken from the same anchor state
    (``info['record'][anchor_field]``, TVR: the pose before the action).
    """
    returns = torch.tensor([t.total_reward for t in trajs], dtype=torch.float64)
    adv, zero_var = losses.group_advantages(returns, [t.group for t in trajs], scale=cfg.scale_rewards)
    per_turn = [[float(adv[i])] * t.num_turns for i, t in enumerate(trajs)]
    if cfg.pose_anchored:
        keys, step_returns, where = [], [], []
        for i, t in enumerate(trajs):
            g = losses.discounted_step_returns(t.turn_rewards, cfg.step_gamma)
            for k, rec in enumerate(t.turn_records):
                if cfg.anchor_field not in rec:
                    raise DataError(f"pose_anchored: step records have no field {cfg.anchor_field!r} "
                                    f"(fields: {sorted(rec)}); set anchor_field")
                keys.append((t.group, repr(rec[cfg.anchor_field])))
                step_returns.append(g[k])
                where.append((i, k))
        step_adv = losses.step_group_advantages(torch.tensor(step_returns, dtype=torch.float64), keys,
                                                scale=cfg.scale_rewards)
        for (i, k), a in zip(where, step_adv.tolist(), strict=True):
            per_turn[i][k] += cfg.step_weight * a
    return per_turn, zero_var


@dataclass
class Sequence:
    """One training sequence: a whole segment, its per-token advantage (0 off policy tokens)."""

    segment: Segment
    advantages: list[float]  # over the segment's response tokens
    old_logp: torch.Tensor | None = None  # over the whole segment, filled by the no-grad pass
    ref_logp: torch.Tensor | None = None


def build_sequences(trajs: list[Trajectory], per_turn: list[list[float]], keep: list[bool]) -> list[Sequence]:
    """Every segment of every kept trajectory, with its turn advantages broadcast to its policy tokens."""
    out = []
    for t, adv, k in zip(trajs, per_turn, keep, strict=True):
        if not k:
            continue
        for seg in t.segments:
            if not any(seg.response_mask):
                continue  # a segment the episode never answered in (cut before sampling)
            out.append(Sequence(seg, [adv[turn] if m else 0.0 for turn, m in zip(seg.response_turns, seg.response_mask, strict=True)]))
    return out


def batch_tensors(turns: TurnTokenizer, seqs: list[Sequence], device: Any, vision: tuple[Any, Any] | None = None,
                  ) -> tuple[dict[str, Any], tuple[list[int], list[int]], dict[str, torch.Tensor]]:
    """Right-padded model inputs, each row's scored span ``(starts, ends)`` (its responses), and
    per-position mask/advantages ``(B, W)``."""
    inputs = collate_inputs(turns, [(s.segment, len(s.segment)) for s in seqs], "right", device, vision)
    width = inputs["input_ids"].shape[1]
    mask = torch.zeros((len(seqs), width), device=device)
    adv = torch.zeros((len(seqs), width), device=device)
    for b, s in enumerate(seqs):
        p, r = len(s.segment.prompt_ids), len(s.segment.response_ids)
        mask[b, p:p + r] = torch.tensor(s.segment.response_mask, dtype=torch.float32)
        adv[b, p:p + r] = torch.tensor(s.advantages, dtype=torch.float32)
    span = ([len(s.segment.prompt_ids) for s in seqs], [len(s.segment) for s in seqs])
    return inputs, span, {"mask": mask, "advantages": adv}


def fill_logprobs(model: Any, turns: TurnTokenizer, seqs: list[Sequence], micro: int, temperature: float,
                  attr: str, accelerator: Any, vision: tuple[Any, Any] | None = None) -> None:
    """Teacher-forced log-probs of every sequence under ``model`` into ``seq.<attr>`` (old or ref);
    ``vision`` = ``(cache, model)`` (the rollout's cache, valid for that model only) supplies image features.
    The old ones come from the training pass's graph (``scoring_mode``), the reference's without grad."""
    context = scoring_mode(model) if attr == "old_logp" else torch.no_grad()
    for lo in range(0, len(seqs), micro):
        chunk = seqs[lo:lo + micro]
        with context, accelerator.autocast():
            inputs, (starts, ends), _ = batch_tensors(turns, chunk, accelerator.device, vision)
            logp = score_tokens(model, inputs, starts, temperature, end=ends).logp.detach()
        for b, s in enumerate(chunk):
            setattr(s, attr, logp[b, :len(s.segment)].float().cpu())


def padded(values: list[torch.Tensor | None], width: int, device: Any) -> torch.Tensor:
    out = torch.zeros((len(values), width), device=device)
    for b, v in enumerate(values):
        if v is not None:
            out[b, :v.shape[0]] = v.to(device)
    return out


# ------------------------------------------------------------------------------------------ steps
def reference_logprobs(cfg: GRPOConfig, run: Run, reference: Any, turns: TurnTokenizer, seqs: list[Sequence]) -> None:
    """π_ref's log-probs into ``seq.ref_logp``: the frozen copy, or (LoRA) the model with its adapters off."""
    if reference is not None:
        fill_logprobs(reference, turns, seqs, cfg.micro_batch_size, cfg.sampling.temperature, "ref_logp", run.accelerator)
        return
    unwrapped = run.accelerator.unwrap_model(run.model)
    with unwrapped.disable_adapter():
        fill_logprobs(unwrapped, turns, seqs, cfg.micro_batch_size, cfg.sampling.temperature, "ref_logp", run.accelerator)


def optimise(cfg: GRPOConfig, run: Run, seqs: list[Sequence], filler: list[Sequence], turns: TurnTokenizer,
             update: int, vision: tuple[Any, Any] | None) -> tuple[dict[str, float], list[float], float]:
    """4. ``epochs`` × ``mini_batches`` optimiser steps, each an exact reduction over its micro-batches and
    every process. Returns the token-summed statistics (``tokens``), the gradient norms and the last LR."""
    model, acc, device = run.model, run.accelerator, run.device
    model.train()
    sums = dict.fromkeys(("policy_loss", "kl", "entropy", "clipfrac", "approx_kl", "ratio", "tokens"), 0.0)
    grad_norms: list[float] = []
    lr = 0.0
    steps_total = cfg.updates * cfg.epochs * cfg.mini_batches  # the LR schedule runs per optimiser step
    order_rng = np.random.default_rng([cfg.seed, run.rank, update])
    for epoch in range(cfg.epochs):
        order = order_rng.permutation(len(seqs)).tolist()
        for mb in range(cfg.mini_batches):
            done = (update * cfg.epochs + epoch) * cfg.mini_batches + mb
            lr = run.set_lr(done / steps_total, 1.0 / steps_total)
            mine = [seqs[i] for i in order[mb::cfg.mini_batches]]
            plan = micro_batch_plan(acc, len(mine), cfg.micro_batch_size)
            denom = global_denominator(acc, mine, cfg.loss_agg)
            for i, batch in enumerate(plan):
                last = i == len(plan) - 1
                chunk = [mine[j] for j in batch.indices] if batch.indices else filler
                with acc.autocast():  # the rollout's autocast state: the cache's features match
                    inputs, (starts, ends), tens = batch_tensors(turns, chunk, device, vision)
                width = inputs["input_ids"].shape[1]
                old = padded([s.old_logp for s in chunk], width, device)
                ref = padded([s.ref_logp for s in chunk], width, device) if cfg.kl_coef > 0 else None
                mask = tens["mask"] * batch.weight
                with run.micro_step(last), acc.autocast():
                    sc = score_tokens(model, inputs, starts, cfg.sampling.temperature, with_entropy=True,
                                      entropy_grad=cfg.entropy_coef > 0, end=ends)
                    # L = −min(ρA, clip(ρ, 1±ε)A) + β·k3(π, π_ref) − c_H·H, reduced by loss_agg
                    pg, st = losses.clipped_policy_loss(sc.logp, old, tens["advantages"], cfg.clip)
                    kl = losses.k3_kl(sc.logp, ref) if ref is not None else torch.zeros_like(pg)
                    per_token = pg + cfg.kl_coef * kl
                    if cfg.entropy_coef > 0:
                        per_token = per_token - cfg.entropy_coef * sc.entropy
                    total, _ = losses.loss_sum_and_count(per_token, mask, cfg.loss_agg)
                    acc.backward(total * run.world / denom)  # (× world: DDP averages the processes' gradients)
                    if last and (norm := run.optimizer_step()) is not None:
                        grad_norms.append(norm)
                with torch.no_grad():
                    sums["tokens"] += float(mask.sum())
                    for key, value in (("policy_loss", pg), ("kl", kl), ("clipfrac", st["clipped"]),
                                       ("approx_kl", st["approx_kl"]), ("ratio", st["ratio"])):
                        sums[key] += float(losses.masked_sum(value.float(), mask))
                    sums["entropy"] += float(losses.masked_sum(sc.entropy.detach(), mask))
    return sums, grad_norms, lr


# ------------------------------------------------------------------------------------------ train
def resolve_task_defaults(cfg: GRPOConfig, suite: Any) -> None:
    """Fill the task-specific keys left at None (action pattern, anchor field) from the task suite."""
    if cfg.single.reward.action_pattern is None:
        cfg.single.reward.action_pattern = suite.action_pattern
        if cfg.mode == "single" and suite.action_pattern is None:
            raise DataError(f"single.reward.action_pattern: task {suite.name!r} names no action pattern; set one")
    if cfg.anchor_field is None:
        cfg.anchor_field = suite.anchor_field
        if cfg.pose_anchored and suite.anchor_field is None:
            raise DataError(f"anchor_field: task {suite.name!r} names no anchor field for pose_anchored; set one")


def train(cfg: GRPOConfig, stop_after: int | None = None, prebuilt: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Run GRPO; returns the final summary (also ``OUTPUT/summary.json``). ``stop_after`` ends the run
    after that many updates as if killed (no final save) — how the tests check exact resume. ``prebuilt``
    = ``(model, processor)`` built by the caller replaces ``cfg.model.path`` (the speed benchmark's random
    11B-sized model, never written to disk)."""
    notices = adopt_model_image_sizes(cfg) if prebuilt is None else []  # before config.json is written
    run = Run(cfg, cfg.micro_batch_size, rl=True)
    acc, rank = run.accelerator, run.rank
    for line in notices:
        acc.print(line)

    # --- task
    suite, options, episodes = task_episodes(cfg.task, {"distance": "geodesic"} if cfg.geodesic_progress else None)
    resolve_task_defaults(cfg, suite)

    # --- model, reference, optimiser
    model, processor, model_meta = run.load_model(prebuilt)
    model_type = model.config.model_type
    reference = None
    if cfg.kl_coef > 0 and not cfg.model.lora.enabled:
        reference = copy.deepcopy(model).eval().requires_grad_(False)  # the frozen SFT policy π_ref
    model, optimizer = run.prepare(prepare_trainable(model, cfg.model, ratio_exact=True))
    if reference is not None:
        reference.to(acc.device)
    turns = TurnTokenizer(processor, model_type)
    sampling = SamplingParams(temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
                              max_new_tokens=cfg.sampling.max_new_tokens)
    max_gen_batch = cfg.sampling.max_batch_size or None

    # --- prompts (single) or env slots (multi); held-out expert states for the action-match diagnostic
    prompts: list[ExpertPrompt] = []
    pool: EnvPool | None = None
    if cfg.mode == "single":
        chosen = episodes[: cfg.single.expert_episodes] if cfg.single.expert_episodes > 0 else episodes
        prompts = expert_prompts(suite, options, chosen)
        next_items = episode_sampler(len(prompts), cfg.seed, rank, run.world)
    else:
        pool = EnvPool(suite, options, turns, cfg.tasks_per_update * cfg.group_size, cfg.task.max_turns,
                       cfg.task.max_tokens, env_threads(cfg.task), sample=sample_segments,
                       prefix_cache=cfg.sampling.prefix_cache)
        next_items = episode_sampler(len(episodes), cfg.seed, rank, run.world)
    per_update = cfg.single.prompts_per_update if cfg.mode == "single" else cfg.tasks_per_update
    heldout = heldout_prompts(cfg, suite, options)

    # --- resume
    state = run.resume({"mode": cfg.mode})
    update = int(state["update"]) if state is not None else 0
    counters = {"env_steps": 0, "episodes": 0, **(state or {}).get("counters", {})}
    run.start_tracker(update, {"setup/episodes": len(episodes), "setup/prompts": len(prompts),
                               "setup/resumed_from_update": update})

    def save(at: int) -> None:
        run.checkpoint(at, {"update": at, "mode": cfg.mode, "counters": dict(counters)})

    last: dict[str, float] = {}
    unwrapped = acc.unwrap_model(model)
    merged = merged_rollout(cfg.sampling, unwrapped)
    while update < cfg.updates and not run.out_of_time():
        t0 = time.perf_counter()
        # 1. rollout (the in-training model samples; eval mode, no grad)
        generator = rollout_generator(cfg.seed, rank, update, acc.device)  # sampling runs on the model's device
        unwrapped.eval()
        items = next_items(update * per_update, per_update)
        vision_cache = rollout_vision_cache(unwrapped, cfg.sampling)
        policy = rollout_model(merged, unwrapped)
        with acc.autocast():
            if cfg.mode == "single":
                trajs = rollout_single(turns, [prompts[i] for i in items], cfg.group_size, update, policy, sampling,
                                       generator, cfg.single.reward, max_gen_batch, vision_cache, cfg.sampling.kv_cache)
            else:
                assert pool is not None
                trajs = rollout_multi(pool, [episodes[i] for i in items], cfg.group_size, update, policy,
                                      sampling, generator, max_gen_batch, vision_cache, cfg.sampling.kv_cache)
        t_rollout = time.perf_counter() - t0
        split = {f"train/{k}_seconds": v for k, v in pool.take_seconds().items()} if pool is not None else {}

        # 2. advantages, broadcast to policy tokens
        per_turn, zero_var = trajectory_advantages(trajs, cfg)
        keep = [not (cfg.drop_zero_variance and bool(z)) for z in zero_var]
        seqs = build_sequences(trajs, per_turn, keep)
        # A process left without sequences (all groups dropped) still joins every collective with a
        # zero-weight pass over one of its segments.
        filler = seqs[:1] or build_sequences(trajs, per_turn, [True] * len(trajs))[:1] \
            or [Sequence(trajs[0].segments[0], [0.0] * len(trajs[0].segments[0].response_ids))]

        # 3. old-policy and reference log-probs
        scored = seqs if seqs else filler
        vision = scoring_vision(vision_cache, model, unwrapped)  # the same for old log-probs and training
        with profile_window(cfg.profile_update == update + 1, run.out, update + 1, acc.device, acc.is_main_process):
            fill_logprobs(unwrapped, turns, scored, cfg.micro_batch_size, sampling.temperature, "old_logp", acc,
                          vision)
            if cfg.kl_coef > 0:
                reference_logprobs(cfg, run, reference, turns, scored)

            # 4. policy update
            sums, grad_norms, lr = optimise(cfg, run, seqs, filler, turns, update, vision)
        update += 1

        # 5. metrics (averaged over processes, counters summed), evaluation, checkpoint
        counters["env_steps"] += sum(t.num_turns for t in trajs)
        counters["episodes"] += len(trajs)
        metrics = rollout_metrics(trajs, zero_var, keep)
        metrics.update(answer_metrics(suite, [text for t in trajs for text in t.responses]))
        tokens = max(1.0, sums["tokens"])
        metrics.update({f"losses/{k}": v / tokens for k, v in sums.items() if k != "tokens"})
        metrics.update({"losses/policy_tokens": sums["tokens"], "train/lr": lr,
                        "train/rollout_seconds": t_rollout, "train/update_seconds": time.perf_counter() - t0,
                        "charts/env_steps": counters["env_steps"], "charts/episodes": counters["episodes"]})
        metrics.update(vision_cache_metrics(vision_cache))
        metrics.update(split)
        if grad_norms:
            metrics["train/grad_norm"] = float(np.mean(grad_norms))
        last = reduce_metrics(acc, metrics, sum_prefixes=("charts/", "episodes/count"),
                              weights={"losses/": "losses/policy_tokens", "episodes/": "episodes/count",
                                       "rewards/": "episodes/count"})
        ending = run.is_last(update, cfg.updates)
        if update % max(1, cfg.logging.every) == 0 or ending:
            run.log(update, last)
        if heldout and (update % cfg.action_match.every == 0 or ending):
            unwrapped.eval()
            with acc.autocast():
                run.log(update, action_match(turns, heldout, unwrapped, sampling.max_new_tokens, cfg.single.reward,
                                             cfg.micro_batch_size * 4))
        if run.after_update(update, ending, save, stop_after):
            break

    # --- end
    if pool is not None:
        pool.close()
    summary = {"update": update, "updates": cfg.updates, "finished": update >= cfg.updates, "last": last}
    return run.end(update, summary, save, {**model_meta, "trained_by": f"spatialrl train grpo --mode {cfg.mode}"})


def global_denominator(accelerator: Any, seqs: list[Sequence], mode: str) -> torch.Tensor:
    """Σ over processes of a mini-batch's loss denominator (#policy tokens, or #sequences for seq-*)."""
    if mode == "token-mean":
        local = float(sum(sum(s.segment.response_mask) for s in seqs))
    else:
        local = float(sum(1 for s in seqs if any(s.segment.response_mask)))
    total = accelerator.reduce(torch.tensor(local, device=accelerator.device, dtype=torch.float64), reduction="sum")
    return total.clamp(min=1.0).float()


def rollout_metrics(trajs: list[Trajectory], zero_var: torch.Tensor, keep: list[bool]) -> dict[str, float]:
    """Per-update rollout statistics (``docs/rl.md`` defines each key). Every trajectory ends within its
    update, so the episode metrics are PPO's (``episodes/return_*``: trajectory returns, ``episodes/success``,
    ``episodes/length_mean``, ``episodes/cut_rate``, ...); ``rollout/*`` adds GRPO's own."""
    groups = {t.group for t in trajs}
    zero_groups = {t.group for t, z in zip(trajs, zero_var.tolist(), strict=True) if z}
    out = episode_metrics(trajs)
    out.update({
        "rollout/response_tokens_mean": float(np.mean([sum(sum(s.response_mask) for s in t.segments) for t in trajs])),
        "rollout/segments_mean": float(np.mean([len(t.segments) for t in trajs])),
        "rollout/zero_variance_group_rate": len(zero_groups) / max(1, len(groups)),
        "rollout/kept_trajectories": float(sum(keep)),
        "rollout/trajectories": float(len(trajs)),
    })
    out.update(reward_component_metrics(trajs))
    return out
