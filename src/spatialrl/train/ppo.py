"""PPO with a value head, the SFTvsRL / RL4VLM recipe, readable top to bottom (CleanRL style).

    spatialrl train ppo configs/ppo/tiny_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero2.yaml \\
        -m spatialrl.cli train ppo configs/ppo/virl_vl_small.yaml              # N GPUs, DeepSpeed ZeRO-2

What one update does (``spec/training.md``; reference: ``rl/trainer/{llama_trainer,algo/ppo}.py``):

1. **Collect** ``num_steps`` env steps on this process: ``num_envs`` slots step together, one batched
   generate per turn (sampling temperature 0.2). V-IRL's verification retries happen in the env: a
   wrong answer is answered with "You failed this trial because ...", the prompter appends it, and the
   next turn continues the same token stream. Unfinished episodes carry over to the next update.
2. **Score** every step once without gradients: the action log-prob

       log π(a|s) = thought_prob_coef · Σ log p(tokens before the action field) + Σ log p(tokens from it)

   (the field is located from character offsets of the decoded answer, logits / temperature) and
   V(s) = ValueHead(final hidden state of the last prompt token).
3. **GAE** (γ 0.9, λ 0.95): δ_t = r_t + γ V_{t+1}(1 − end_t) − V_t, A_t = δ_t + γλ(1 − end_t)A_{t+1},
   R_t = A_t + V_t; A normalised.
4. **Update**: ``ppo_epochs`` passes over the shuffled steps in micro-batches of ``minibatch_size``,
   ``grad_accum`` of them per optimiser step:

       ρ = exp(log π(a|s) − log π_old(a|s))
       L_π = −min(ρA, clip(ρ, 1 ± 0.1)A)            (only the clipped term where ρ > ratio_guard)
       L_V = ½ max((V − R)², (V_old + clip(V − V_old, ±0.1) − R)²)
       L = L_π + value_coef · L_V − entropy_coef · H

   Adam(eps 1e-7) over all weights + value head, gradient norm clipped to 0.01; cosine LR stepped once
   per update (T_max ``lr_max_steps``).
5. Log the reference's metrics, checkpoint (model, value head, optimizer, RNG and the
   in-flight episodes, so a resumed run continues exactly).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.errors import DataError
from spatialrl.io import atomic_write_bytes
from spatialrl.models.value_head import ValueHead, hidden_size_of
from spatialrl.rollout.trajectory import Segment, TurnTokenizer
from spatialrl.train import losses
from spatialrl.train.agent_loop import EnvPool, Step
from spatialrl.train.common import (
    Tracker,
    count_parameters,
    find_resume_checkpoint,
    list_checkpoints,
    load_checkpoint,
    prepare_trainable,
    save_checkpoint,
)
from spatialrl.train.config import config_to_dict
from spatialrl.train.merged_rollout import merged_rollout, rollout_model
from spatialrl.train.policy_ops import collate_inputs, score_tokens, token_char_ends
from spatialrl.train.rl_common import (
    backward_scaled,
    begin_accumulation,
    end_run,
    env_threads,
    episode_metrics,
    episode_sampler,
    finish_update,
    load_policy_model,
    lr_setter,
    make_optimizer,
    reduce_metrics,
    reward_component_metrics,
    rollout_generator,
    rollout_vision_cache,
    scoring_vision,
    start_run,
    stats,
    task_episodes,
    vision_cache_metrics,
)
from spatialrl.train.rl_config import PPOConfig
from spatialrl.train.safe_state import load_state, state_bytes

ROLLOUT_DIR = "rollout_state"


# ------------------------------------------------------------------------------------------ samples
@dataclass
class Sample:
    """One env step as a training sample: the segment prefix through this turn's answer.

    ``weights`` covers positions ``[answer_start, end)``: thought_prob_coef before the action field, 1
    from it on. ``old_logp``/``value`` are filled by the scoring pass, ``advantage``/``ret`` by GAE.
    """

    segment: Segment
    answer_start: int
    end: int
    weights: list[float]
    old_logp: float = 0.0
    value: float = 0.0
    advantage: float = 0.0
    ret: float = 0.0


def make_sample(step: Step, tokenizer: Any, cfg: PPOConfig) -> Sample:
    """The sample of ``step`` with its SFTvsRL token weights located from character offsets."""
    traj = step.trajectory
    seg = traj.segments[traj.turn_segment[step.turn]]
    start, end = seg.turn_span(step.turn)
    text, ends = token_char_ends(tokenizer, seg.ids[start:end])
    anchor = text.rfind(cfg.action_field)
    weights = losses.action_token_weights(ends, anchor if anchor >= 0 else None, cfg.thought_prob_coef)
    return Sample(seg, start, end, weights)


def batch_inputs(turns: TurnTokenizer, samples: list[Sample], device: Any, vision: tuple[Any, Any] | None = None,
                 ) -> tuple[dict[str, Any], int, torch.Tensor, torch.Tensor]:
    """Right-padded inputs of sample prefixes, the first scored position, the ``(B, W)`` token weights
    and the ``(B,)`` value positions (last prompt token before each answer). ``vision`` = ``(cache,
    unwrapped model)``: image features from the update's vision cache (a frozen tower's features are
    those the rollout computed)."""
    inputs = collate_inputs(turns, [(s.segment, s.end) for s in samples], "right", device, vision)
    width = inputs["input_ids"].shape[1]
    weights = torch.zeros((len(samples), width), device=device)
    for b, s in enumerate(samples):
        weights[b, s.answer_start:s.end] = torch.tensor(s.weights, dtype=torch.float32)
    start = min(s.answer_start for s in samples)
    positions = torch.tensor([s.answer_start - 1 for s in samples], device=device)
    return inputs, start, weights, positions


def evaluate(model: Any, head: Any, turns: TurnTokenizer, samples: list[Sample], temperature: float,
             with_entropy: bool, device: Any, entropy_grad: bool = True, vision: tuple[Any, Any] | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(action log-probs ``(B,)``, values ``(B,)``, mean answer-token entropy ``(B,)`` or None)."""
    inputs, start, weights, positions = batch_inputs(turns, samples, device, vision)
    sc = score_tokens(model, inputs, start, temperature, with_entropy=with_entropy, hidden_positions=positions,
                      value_head=head, entropy_grad=entropy_grad)
    logp = losses.weighted_sequence_logprob(sc.logp, weights)
    entropy = None
    if sc.entropy is not None:
        entropy = losses.masked_mean(sc.entropy, weights > 0, dim=-1)
    return logp, sc.hidden.float(), entropy


def epoch_micro_batches(n: int, size: int, shuffle: str, rng: np.random.Generator) -> list[list[int]]:
    """One epoch's micro-batches of sample indices. ``samples``: a fresh permutation cut into batches;
    ``batches``: the scoring pass's batches (``[0, size)``, ``[size, 2·size)``, ...) in shuffled order."""
    if shuffle == "batches":
        scoring = [list(range(lo, min(lo + size, n))) for lo in range(0, n, size)]
        return [scoring[i] for i in rng.permutation(len(scoring)).tolist()]
    order = rng.permutation(n).tolist()
    return [order[i:i + size] for i in range(0, n, size)]


# ------------------------------------------------------------------------------------------ train
def train(cfg: PPOConfig, stop_after: int | None = None, prebuilt: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Run PPO; returns the final summary (also ``OUTPUT/summary.json``). ``stop_after`` ends the run
    after that many updates as if killed (no final save) — how the tests check exact resume. ``prebuilt``
    = ``(model, processor)`` built by the caller replaces ``cfg.model.path`` (the speed benchmark's random
    11B-sized model, never written to disk)."""
    # --- setup
    accelerator, out = start_run(cfg, cfg.minibatch_size)
    world, rank = accelerator.num_processes, accelerator.process_index
    t_start = time.perf_counter()

    # --- task: this process's endless stream of episodes
    suite, options, episodes = task_episodes(cfg.task)
    next_episode = episode_sampler(len(episodes), cfg.seed, rank, world)

    # --- model + value head (one module, so DeepSpeed/FSDP see a single model), optimiser, schedule
    model, processor, model_meta = load_policy_model(cfg, prebuilt)
    model_type = model.config.model_type
    model = prepare_trainable(model, cfg.model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)  # the same head on every process
        head = ValueHead(hidden_size_of(model), tuple(cfg.value_head_widths))
    model.value_head = head  # a submodule: trained, checkpointed and sharded with the model
    model._keys_to_ignore_on_save = [f"value_head.{k}" for k in head.state_dict()]  # not in the HF export
    trainable, total_params = count_parameters(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(accelerator, params, cfg)
    period = cfg.lr_max_steps if cfg.lr_max_steps > 0 else cfg.updates

    model, optimizer = accelerator.prepare(model, optimizer)
    set_lr = lr_setter(optimizer, cfg.optim, period)  # stepped once per update (CosineAnnealingLR, T_max)
    unwrapped = accelerator.unwrap_model(model)
    value_head = unwrapped.value_head
    merged = merged_rollout(cfg.sampling, unwrapped)
    turns = TurnTokenizer(processor, model_type)
    tokenizer = turns.tokenizer
    sampling = SamplingParams(temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
                              max_new_tokens=cfg.sampling.max_new_tokens)
    pool = EnvPool(suite, options, turns, cfg.num_envs, cfg.task.max_turns, cfg.task.max_tokens,
                   env_threads(cfg.task))
    rollout_state: dict[str, Any] = {"episodes_started": 0, "env_steps": 0, "episodes_done": 0}

    # --- resume: weights/optimiser/RNG via accelerate, in-flight episodes via our rollout state
    update = 0
    resume_from = find_resume_checkpoint(cfg.output_dir, cfg.checkpoint.resume)
    if resume_from is not None:
        state = load_checkpoint(accelerator, resume_from)
        for key, now in (("world_size", world), ("num_envs", cfg.num_envs)):
            if state.get(key) != now:
                raise DataError(f"{resume_from}: cannot resume, {key} was {state.get(key)} and is now {now}; "
                                "use a new output_dir or checkpoint.resume=never")
        update = int(state["update"])
        path = out / ROLLOUT_DIR / f"update-{update:06d}-rank-{rank}.pt"
        if not path.is_file():
            raise DataError(f"{path}: missing; the checkpoint {resume_from} has no rollout state for rank {rank}")
        saved = load_state(path)  # weights_only: a copied run folder cannot run code
        rollout_state.update(saved["counters"])
        for i, item in enumerate(saved["slots"]):
            if item is not None:
                spec, answers, trajectory = item
                pool.start(i, spec, resume=(answers, trajectory))

    def refill() -> None:
        idle = [i for i, slot in enumerate(pool.slots) if slot.spec is None]
        k = rollout_state["episodes_started"]
        picks = next_episode(k, len(idle)) if idle else []
        pool.start_many([(i, episodes[j], None) for i, j in zip(idle, picks, strict=True)])
        rollout_state["episodes_started"] = k + len(idle)

    tracker = Tracker(accelerator, out, cfg.logging, cfg)
    tracker.log(update, {"setup/params_trainable": trainable, "setup/params_total": total_params,
                         "setup/processes": world, "setup/episodes": len(episodes),
                         "setup/resumed_from_update": update})

    def save(at: int) -> None:
        # Rollout state first (a checkpoint folder without it is never complete), then the checkpoint.
        blob = {"slots": pool.snapshot(), "counters": dict(rollout_state)}
        atomic_write_bytes(out / ROLLOUT_DIR / f"update-{at:06d}-rank-{rank}.pt", state_bytes(blob))
        state = {"update": at, "world_size": world, "num_envs": cfg.num_envs, "config": config_to_dict(cfg)}
        path = save_checkpoint(accelerator, model, processor, out, at, state, cfg.checkpoint.keep_last)
        if accelerator.is_main_process:
            value_head.save(path / "hf")
            kept = {p.name for p in list_checkpoints(out)}
            for f in (out / ROLLOUT_DIR).glob("update-*.pt"):
                if f"step-{f.name.split('-')[1]}" not in kept:
                    f.unlink(missing_ok=True)
        accelerator.wait_for_everyone()

    last: dict[str, float] = {}
    stopped_early = False
    rows = cfg.num_steps // cfg.num_envs
    last_step: dict[int, Step] = {}  # id(trajectory) -> its latest stored step in this update

    def on_cut(trajectory) -> None:  # an episode cut before sampling ends at its last stored step
        step = last_step.get(id(trajectory))
        if step is not None:
            step.ended = True

    first_update = update
    while update < cfg.updates:
        t0 = time.perf_counter()
        # 1. collect num_steps env steps: storage[t][n] is slot n's step at turn t of this update
        chatty = update == first_update or (update + 1) % max(1, cfg.logging.every) == 0
        unwrapped.eval()
        generator = rollout_generator(cfg.seed, rank, update, accelerator.device)  # sampling runs on the model's device
        policy = rollout_model(merged, unwrapped)
        storage: list[list[Step]] = []
        vision_cache = rollout_vision_cache(unwrapped, cfg.sampling)
        last_step.clear()
        finished = []
        with accelerator.autocast():
            for _ in range(rows):
                row: dict[int, Step] = {}
                for _attempt in range(2):  # a slot cut before sampling (token budget) is refilled and retried
                    refill()
                    todo = [i for i in range(cfg.num_envs) if i not in row]
                    steps, done = pool.turn(policy, sampling, generator, slots=todo, on_cut=on_cut,
                                            max_batch_size=cfg.sampling.max_batch_size or None,
                                            vision_cache=vision_cache, kv_cache=cfg.sampling.kv_cache)
                    finished.extend(done)
                    row.update({s.slot: s for s in steps})
                    if len(row) == cfg.num_envs:
                        break
                else:
                    raise DataError(f"task.max_tokens={cfg.task.max_tokens}: a fresh episode's prompt plus "
                                    f"sampling.max_new_tokens={sampling.max_new_tokens} does not fit; raise it")
                for s in row.values():
                    last_step[id(s.trajectory)] = s
                storage.append([row[i] for i in range(cfg.num_envs)])
                if chatty and rows > 1:
                    tracker.phase(update + 1, f"turn {len(storage)}/{rows} sampled at {time.perf_counter() - t0:.1f} s")
        t_collect = time.perf_counter() - t0
        seconds = pool.take_seconds()
        split = {f"train/{k}_seconds": v for k, v in seconds.items()}  # where the rollout went
        if chatty:
            tracker.phase(update + 1, f"collected {rows * cfg.num_envs} steps in {t_collect:.1f} s ("
                          + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + ")")

        # 2. score every step (old log-probs, values) and the bootstrap values of the next states
        samples = [[make_sample(s, tokenizer, cfg) for s in row] for row in storage]
        flat = [x for row in samples for x in row]
        pass_vision = scoring_vision(vision_cache, model, unwrapped)  # the same for scoring and training
        with torch.no_grad(), accelerator.autocast():
            for lo in range(0, len(flat), cfg.minibatch_size):
                chunk = flat[lo:lo + cfg.minibatch_size]
                logp, value, _ = evaluate(unwrapped, value_head, turns, chunk, sampling.temperature, False,
                                          accelerator.device, vision=pass_vision)
                for s, lp, v in zip(chunk, logp.tolist(), value.tolist(), strict=True):
                    s.old_logp, s.value = lp, v
            next_value = torch.zeros(cfg.num_envs)
            live = [i for i, slot in enumerate(pool.slots) if slot.segment is not None]
            for lo in range(0, len(live), cfg.minibatch_size):
                idx = live[lo:lo + cfg.minibatch_size]
                segs = [pool.slots[i].segment for i in idx]
                inputs = turns.collate([(sg, len(sg)) for sg in segs], padding_side="right", device=accelerator.device)
                width = inputs["input_ids"].shape[1]
                pos = torch.tensor([len(sg) - 1 for sg in segs], device=accelerator.device)
                start = min(min(len(sg) for sg in segs), width - 1)
                sc = score_tokens(unwrapped, inputs, start, sampling.temperature, hidden_positions=pos,
                                  value_head=value_head)
                next_value[idx] = sc.hidden.float().cpu()

        if chatty:
            tracker.phase(update + 1, f"scored {len(flat)} steps in {time.perf_counter() - t0 - t_collect:.1f} s")

        # 3. GAE over the (steps, envs) grid; a step ends its episode if the env said so
        rewards = torch.tensor([[s.reward for s in row] for row in storage])
        # (reference quirk, opt-in: only termination stops GAE, so a truncated episode bootstraps into
        # the next episode's first value)
        ends = torch.tensor([[float(s.terminated if cfg.bootstrap_across_truncation else s.ended) for s in row]
                             for row in storage])
        values = torch.tensor([[x.value for x in row] for row in samples])
        advantages, returns = losses.compute_gae(rewards, values, ends, next_value, cfg.gamma, cfg.gae_lambda)
        norm_adv = losses.normalize(advantages) if cfg.normalize_advantages else advantages
        for t, row in enumerate(samples):
            for n, x in enumerate(row):
                x.advantage, x.ret = float(norm_adv[t, n]), float(returns[t, n])

        # 4. PPO epochs over shuffled steps; grad_accum micro-batches per optimiser step
        lr = set_lr(update)
        model.train()
        sums = dict.fromkeys(("action_loss", "value_loss", "entropy", "clipfrac", "approx_kl", "ratio", "n"), 0.0)
        grad_norms: list[float] = []
        order_rng = np.random.default_rng([cfg.seed, rank, update])
        for epoch in range(cfg.ppo_epochs):
            micro = epoch_micro_batches(len(flat), cfg.minibatch_size, cfg.shuffle, order_rng)
            for lo in range(0, len(micro), cfg.grad_accum):
                group = micro[lo:lo + cfg.grad_accum]
                begin_accumulation(accelerator, len(group))
                for idx in group:
                    chunk = [flat[i] for i in idx]
                    old_logp = torch.tensor([x.old_logp for x in chunk], device=accelerator.device)
                    old_value = torch.tensor([x.value for x in chunk], device=accelerator.device)
                    adv = torch.tensor([x.advantage for x in chunk], device=accelerator.device)
                    ret = torch.tensor([x.ret for x in chunk], device=accelerator.device)
                    with accelerator.accumulate(model), accelerator.autocast():
                        logp, value, entropy = evaluate(model, value_head, turns, chunk, sampling.temperature, True,
                                                        accelerator.device, entropy_grad=cfg.entropy_coef > 0,
                                                        vision=pass_vision)
                        pg, st = losses.clipped_policy_loss(logp, old_logp, adv, cfg.clip, cfg.ratio_guard)
                        action_loss = pg.mean()
                        value_loss = losses.clipped_value_loss(value, old_value, ret, cfg.value_clip).mean()
                        loss = action_loss + cfg.value_coef * value_loss
                        if cfg.entropy_coef > 0:
                            loss = loss - cfg.entropy_coef * entropy.mean()
                        backward_scaled(accelerator, loss / len(group), len(group))
                        if accelerator.sync_gradients and cfg.optim.max_grad_norm > 0:
                            norm = accelerator.clip_grad_norm_(params, cfg.optim.max_grad_norm)
                            if norm is not None:
                                grad_norms.append(float(norm))
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                    k = len(chunk)
                    sums["n"] += k
                    sums["action_loss"] += float(action_loss.detach()) * k
                    sums["value_loss"] += float(value_loss.detach()) * k
                    sums["clipfrac"] += float(st["clipped"].sum())
                    sums["approx_kl"] += float(st["approx_kl"].sum())
                    sums["ratio"] += float(st["ratio"].sum())
                    if entropy is not None:
                        sums["entropy"] += float(entropy.detach().sum())
            if chatty:
                tracker.phase(update + 1, f"epoch {epoch + 1}/{cfg.ppo_epochs} done at {time.perf_counter() - t0:.1f} s")
        update += 1

        # 5. metrics (the reference's list; docs/rl.md defines each), checkpoint
        rollout_state["env_steps"] += len(flat)
        rollout_state["episodes_done"] += len(finished)
        n = max(1.0, sums.pop("n"))
        metrics = {f"losses/{k}": v / n for k, v in sums.items()}
        metrics.update(stats("rollout/reward", rewards))
        metrics.update(stats("rollout/value", values))
        metrics.update(stats("rollout/return", returns))
        metrics.update(stats("rollout/advantage", advantages))
        metrics["losses/explained_variance"] = losses.explained_variance(values.flatten(), returns.flatten())
        metrics.update(episode_metrics(finished))
        metrics.update(reward_component_metrics(finished))
        metrics.update({"train/lr": lr, "train/collect_seconds": t_collect,
                        "train/update_seconds": time.perf_counter() - t0,
                        "train/samples_per_minute": 60.0 * len(flat) / max(1e-9, time.perf_counter() - t0),
                        "charts/env_steps": rollout_state["env_steps"], "charts/episodes": rollout_state["episodes_done"],
                        "charts/update_samples": float(len(flat))})
        metrics.update(vision_cache_metrics(vision_cache))
        metrics.update(split)
        if grad_norms:
            metrics["train/grad_norm"] = float(np.mean(grad_norms))
        metrics = reduce_metrics(accelerator, metrics,
                                 sum_prefixes=("charts/", "train/samples_per_minute", "episodes/count"),
                                 weights={"episodes/": "episodes/count", "rewards/": "episodes/count"})
        last = metrics
        if update % max(1, cfg.logging.every) == 0 or update == cfg.updates:
            tracker.log(update, metrics)
        if finish_update(update, cfg, accelerator, model, processor, tracker, save, stop_after, t_start):
            stopped_early = True
            break

    # --- end
    pool.close()
    return end_run(cfg, accelerator, model, processor, tracker, out, save, update=update, last=last, t_start=t_start,
                   stopped_early=stopped_early, meta={**model_meta, "trained_by": "spatialrl train ppo"},
                   export_extra=value_head.save)  # the critic ships beside the exported model
