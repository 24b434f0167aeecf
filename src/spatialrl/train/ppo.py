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
4. **Update**: ``epochs`` passes over the shuffled steps in micro-batches of ``micro_batch_size``,
   ``grad_accum`` of them per optimiser step:

       ρ = exp(log π(a|s) − log π_old(a|s))
       L_π = −min(ρA, clip(ρ, 1 ± 0.1)A)            (only the clipped term where ρ > ratio_guard)
       (``ratio: token``: one ρ_t per answer token, L_π the weighted mean of the per-token terms)
       L_V = ½ max((V − R)², (V_old + clip(V − V_old, ±0.1) − R)²)
       L = L_π + value_coef · L_V − entropy_coef · H

   Adam(eps 1e-7) over all weights + value head, gradient norm clipped to 0.01; cosine LR stepped once
   per update (T_max ``lr_max_steps``). The first ``critic_warmup`` updates train the value head alone
   (L = value_coef · L_V on a detached hidden state); ``detach_critic`` detaches it in every update.
5. Log the reference's metrics, checkpoint (model, value head, optimizer, RNG and the
   in-flight episodes, so a resumed run continues exactly).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.errors import DataError
from spatialrl.io import atomic_write_bytes
from spatialrl.models.value_head import ValueHead, hidden_size_of
from spatialrl.rollout.agent_loop import EnvPool, Step
from spatialrl.rollout.trajectory import Segment, Trajectory, TurnTokenizer
from spatialrl.train import losses, rl_common
from spatialrl.train.common import list_checkpoints, prepare_trainable, scoring_mode
from spatialrl.train.merged_rollout import merged_rollout, rollout_model
from spatialrl.train.metrics import episode_metrics, reduce_metrics, reward_component_metrics, stats
from spatialrl.train.policy_ops import collate_inputs, sample_segments, score_tokens, token_char_ends
from spatialrl.train.profiling import profile_window
from spatialrl.train.rl_config import PPOConfig
from spatialrl.train.run import Run
from spatialrl.train.safe_state import load_state, state_bytes
from spatialrl.train.task_stream import env_threads, episode_sampler, rollout_generator, task_episodes
from spatialrl.train.vision_cache_policy import rollout_vision_cache, scoring_vision, vision_cache_metrics

ROLLOUT_DIR = "rollout_state"


# ------------------------------------------------------------------------------------------ samples
@dataclass
class Sample:
    """One env step as a training sample: the segment prefix through this turn's answer.

    ``weights`` covers positions ``[answer_start, end)``: thought_prob_coef before the action field, 1
    from it on. ``old_logp`` (its per-token terms ``old_token_logp``) and ``value`` are filled by the
    scoring pass, ``advantage``/``ret`` by GAE.
    """

    segment: Segment
    answer_start: int
    end: int
    weights: list[float]
    old_logp: float = 0.0
    old_token_logp: list[float] = field(default_factory=list)
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


def conversation_ids(samples: list[Sample]) -> list[int]:
    """Each sample's conversation (its segment), numbered in order of first appearance."""
    ids: dict[int, int] = {}
    return [ids.setdefault(id(s.segment), len(ids)) for s in samples]


def _rows(samples: list[Sample]) -> list[list[Sample]]:
    """The samples of each row (conversation), in ``conversation_ids`` order."""
    rows = conversation_ids(samples)
    members: list[list[Sample]] = [[] for _ in range(max(rows) + 1)]
    for s, r in zip(samples, rows, strict=True):
        members[r].append(s)
    return members


def batch_inputs(turns: TurnTokenizer, samples: list[Sample], device: Any, vision: tuple[Any, Any] | None = None,
                 ) -> tuple[dict[str, Any], list[list[tuple[int, int]]], torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded inputs with one row per conversation: samples of one segment (a conversation's turns)
    share the row, scored through its last sample's answer — causal attention gives each answer the
    log-probs and value of its own prefix, and the shared prefix is computed once. Returns the inputs,
    each row's scored spans (its samples' answers), the per-sample ``(N, W)`` token weights, the ``(N,)``
    value positions (last prompt token before each answer) and the ``(N,)`` row of each sample.
    ``vision`` = ``(cache, unwrapped model)``: image features from the update's vision cache (a frozen
    tower's features are those the rollout computed)."""
    rows = conversation_ids(samples)
    members = _rows(samples)
    inputs = collate_inputs(turns, [(m[0].segment, max(x.end for x in m)) for m in members], "right", device, vision)
    width = inputs["input_ids"].shape[1]
    weights = torch.zeros((len(samples), width), device=device)
    for b, s in enumerate(samples):
        weights[b, s.answer_start:s.end] = torch.tensor(s.weights, dtype=torch.float32)
    spans = [sorted((x.answer_start, x.end) for x in m) for m in members]
    positions = torch.tensor([s.answer_start - 1 for s in samples], device=device)
    return inputs, spans, weights, positions, torch.tensor(rows, device=device)


def forward_samples(model: Any, head: Any, turns: TurnTokenizer, samples: list[Sample], temperature: float,
             with_entropy: bool, device: Any, entropy_grad: bool = True, vision: tuple[Any, Any] | None = None,
             counts: dict[str, float] | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(per-token log-probs ``(N, W)``, token weights ``(N, W)``, values ``(N,)``, mean answer-token
    entropy ``(N,)`` or None), one row per sample (a packed conversation's row repeated for each of its
    samples; the weights select each one's answer). ``head`` is called as is (``critic_head`` detaches
    its input). ``counts`` gets the decoder's input tokens added: ``tokens`` (real) and ``padded``."""
    inputs, spans, weights, positions, rows = batch_inputs(turns, samples, device, vision)
    if counts is not None:  # what the decoder processed, for the logged tokens/s (host-side shapes: no sync)
        counts["tokens"] = counts.get("tokens", 0.0) + float(sum(max(x.end for x in m) for m in _rows(samples)))
        counts["padded"] = counts.get("padded", 0.0) + float(inputs["input_ids"].numel())
    sc = score_tokens(model, inputs, None, temperature, with_entropy=with_entropy, hidden_positions=positions,
                      value_head=head, entropy_grad=entropy_grad, spans=spans, hidden_rows=rows)
    entropy = None
    if sc.entropy is not None:
        entropy = losses.masked_mean(sc.entropy[rows], weights > 0, dim=-1)
    return sc.logp[rows], weights, sc.hidden.float(), entropy


def old_token_logps(samples: list[Sample], width: int, device: Any) -> torch.Tensor:
    """The scoring pass's per-token log-probs laid out like ``batch_inputs``' weights, ``(B, width)``."""
    old = torch.zeros((len(samples), width), device=device)
    for b, s in enumerate(samples):
        old[b, s.answer_start:s.end] = torch.tensor(s.old_token_logp, dtype=torch.float32)
    return old


# ------------------------------------------------------------------------------------------ episodes
class EpisodeFeed:
    """This process's env slots and the endless episode stream that refills them, plus what a checkpoint
    keeps of them (in-flight episodes, counters) so a resumed run continues the same token streams."""

    def __init__(self, pool: EnvPool, episodes: list[Any], take: Callable[[int, int], list[int]]):
        self.pool, self.episodes, self.take = pool, episodes, take
        self.counters: dict[str, int] = {"episodes_started": 0, "env_steps": 0, "episodes_done": 0}
        self.last_step: dict[int, Step] = {}  # id(trajectory) -> its latest stored step in this update

    def refill(self) -> None:
        idle = [i for i, slot in enumerate(self.pool.slots) if slot.spec is None]
        k = self.counters["episodes_started"]
        picks = self.take(k, len(idle)) if idle else []
        self.pool.start_many([(i, self.episodes[j], None) for i, j in zip(idle, picks, strict=True)])
        self.counters["episodes_started"] = k + len(idle)

    def on_cut(self, trajectory: Trajectory) -> None:
        """An episode cut before sampling ends at its last stored step."""
        step = self.last_step.get(id(trajectory))
        if step is not None:
            step.ended = True

    def save(self, path: Path) -> None:
        atomic_write_bytes(path, state_bytes({"slots": self.pool.snapshot(), "counters": dict(self.counters)}))

    def restore(self, path: Path) -> None:
        saved = load_state(path)  # weights_only: a copied run folder cannot run code
        self.counters.update(saved["counters"])
        for i, item in enumerate(saved["slots"]):
            if item is not None:
                spec, answers, trajectory = item
                self.pool.start(i, spec, resume=(answers, trajectory))


@dataclass
class Update:
    """What one update collected and computed: ``steps[t][n]`` is slot n's step at turn t."""

    steps: list[list[Step]]
    finished: list[Trajectory]
    seconds: dict[str, float]
    t_collect: float
    samples: list[list[Sample]] = field(default_factory=list)
    rewards: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    score_counts: dict[str, float] = field(default_factory=dict)  # the scoring pass's decoder input tokens

    @property
    def flat(self) -> list[Sample]:
        return [x for row in self.samples for x in row]


# ------------------------------------------------------------------------------------------ steps
def collect(cfg: PPOConfig, feed: EpisodeFeed, policy: Any, sampling: SamplingParams, generator: torch.Generator,
            vision_cache: Any, say: Callable[[str], None] | None) -> Update:
    """1. ``num_steps`` env steps: every turn, refill idle slots and step all of them with one generate."""
    t0 = time.perf_counter()
    rows = cfg.num_steps // cfg.num_envs
    storage: list[list[Step]] = []
    finished: list[Trajectory] = []
    feed.last_step.clear()
    for _ in range(rows):
        row: dict[int, Step] = {}
        for _attempt in range(2):  # a slot cut before sampling (token budget) is refilled and retried
            feed.refill()
            todo = [i for i in range(cfg.num_envs) if i not in row]
            steps, done = feed.pool.turn(policy, sampling, generator, slots=todo, on_cut=feed.on_cut,
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
            feed.last_step[id(s.trajectory)] = s
        storage.append([row[i] for i in range(cfg.num_envs)])
        if say and rows > 1:
            say(f"turn {len(storage)}/{rows} sampled at {time.perf_counter() - t0:.1f} s")
    t_collect = time.perf_counter() - t0
    seconds = feed.pool.take_seconds()
    if say:
        say(f"collected {rows * cfg.num_envs} steps in {t_collect:.1f} s ("
            + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + ")")
    return Update(storage, finished, seconds, t_collect)


def score(cfg: PPOConfig, run: Run, upd: Update, model: Any, head: Any, turns: TurnTokenizer, pool: EnvPool,
          vision: tuple[Any, Any] | None) -> torch.Tensor:
    """2. Old log-probs and values of every step (into the samples), and the bootstrap values of the
    slots' next states (returned). The old log-probs come from the training pass's graph
    (``scoring_mode``: compiled blocks round each graph their own way)."""
    temperature, micro = cfg.sampling.temperature, cfg.micro_batch_size
    upd.samples = [[make_sample(s, turns.tokenizer, cfg) for s in row] for row in upd.steps]
    flat = upd.flat
    scoring = scoring_mode(model)  # once per update: it walks the model's modules
    for idx in rl_common.scoring_micro_batches(conversation_ids(flat), micro, cfg.shuffle):
        chunk = [flat[j] for j in idx]
        with scoring:
            token_logp, weights, value, _ = forward_samples(model, head, turns, chunk, temperature, False,
                                                            run.device, vision=vision, counts=upd.score_counts)
            token_logp, value = token_logp.detach(), value.detach()
        logp = losses.weighted_sequence_logprob(token_logp, weights)
        for s, row, lp, v in zip(chunk, token_logp.tolist(), logp.tolist(), value.tolist(), strict=True):
            s.old_logp, s.old_token_logp, s.value = lp, row[s.answer_start:s.end], v
    return bootstrap_values(cfg, run, model, head, turns, pool)


@torch.no_grad()
def bootstrap_values(cfg: PPOConfig, run: Run, model: Any, head: Any, turns: TurnTokenizer,
                     pool: EnvPool) -> torch.Tensor:
    """The value of each live slot's next state (GAE's bootstrap), at its last token."""
    temperature, micro = cfg.sampling.temperature, cfg.micro_batch_size
    next_value = torch.zeros(cfg.num_envs)
    live = [i for i, slot in enumerate(pool.slots) if slot.segment is not None]
    for lo in range(0, len(live), micro):
        idx = live[lo:lo + micro]
        segs = [pool.slots[i].segment for i in idx]
        inputs = turns.collate([(sg, len(sg)) for sg in segs], padding_side="right", device=run.device)
        pos = torch.tensor([len(sg) - 1 for sg in segs], device=run.device)
        # only the value at each row's last token is wanted: score one token per row (the cheapest span)
        sc = score_tokens(model, inputs, [len(sg) - 1 for sg in segs], temperature, hidden_positions=pos,
                          value_head=head, end=[len(sg) for sg in segs])
        next_value[idx] = sc.hidden.float().cpu()
    return next_value


def advantages(cfg: PPOConfig, upd: Update, next_value: torch.Tensor) -> None:
    """3. GAE over the (steps, envs) grid; a step ends its episode if the env said so (or a cut)."""
    upd.rewards = torch.tensor([[s.reward for s in row] for row in upd.steps])
    # (reference quirk, opt-in: only termination stops GAE, so a truncated episode bootstraps into the
    # next episode's first value)
    ends = torch.tensor([[float(s.terminated if cfg.bootstrap_across_truncation else s.ended) for s in row]
                         for row in upd.steps])
    upd.values = torch.tensor([[x.value for x in row] for row in upd.samples])
    upd.advantages, upd.returns = losses.compute_gae(upd.rewards, upd.values, ends, next_value, cfg.gamma,
                                                     cfg.gae_lambda)
    norm_adv = losses.normalize(upd.advantages) if cfg.normalize_advantages else upd.advantages
    for t, row in enumerate(upd.samples):
        for n, x in enumerate(row):
            x.advantage, x.ret = float(norm_adv[t, n]), float(upd.returns[t, n])


# losses.ppo_policy_loss's per-sample statistics, summed over an update's forwards (rl_common.ppo_loss_metrics)
POLICY_STATS = ("approx_kl", "ratio", "clipped_sequence", "clipped_tokens", "tokens", "kl_sequence", "kl_tokens")


def optimise(cfg: PPOConfig, run: Run, flat: list[Sample], head: Any, turns: TurnTokenizer, update: int,
             vision: tuple[Any, Any] | None, say: Callable[[str], None] | None, t0: float,
             ) -> tuple[dict[str, float], list[float]]:
    """4. ``epochs`` passes over the shuffled steps; ``grad_accum`` micro-batches per optimiser step
    (during critic warm-up: the value loss alone, the head on a detached input). Returns the
    sample-summed loss statistics (``n``: samples; ``clipped_tokens`` over ``tokens``) and the gradient norms."""
    model, acc, device = run.model, run.accelerator, run.device
    model.train()
    warmup = update < cfg.critic_warmup
    value_head = rl_common.critic_head(head, cfg.detach_critic or warmup)
    sums = dict.fromkeys(("action_loss", "value_loss", "entropy", "n", *POLICY_STATS), 0.0)
    counts: dict[str, float] = {}  # the epochs' decoder input tokens
    grad_norms: list[float] = []
    order_rng = np.random.default_rng([cfg.seed, run.rank, update])
    conversations = conversation_ids(flat)
    for epoch in range(cfg.epochs):
        micro = rl_common.epoch_micro_batches(len(flat), cfg.micro_batch_size, cfg.shuffle, order_rng, conversations)
        for lo in range(0, len(micro), cfg.grad_accum):
            group = micro[lo:lo + cfg.grad_accum]
            n_step = sum(len(idx) for idx in group)  # the optimiser step's samples: its loss is their mean
            for i, idx in enumerate(group):
                last = i == len(group) - 1
                chunk = [flat[j] for j in idx]
                old_value = torch.tensor([x.value for x in chunk], device=device)
                adv = torch.tensor([x.advantage for x in chunk], device=device)
                ret = torch.tensor([x.ret for x in chunk], device=device)
                with run.micro_step(last), acc.autocast():
                    logp, weights, value, entropy = forward_samples(
                        model, value_head, turns, chunk, cfg.sampling.temperature, True, device,
                        entropy_grad=cfg.entropy_coef > 0 and not warmup, vision=vision, counts=counts)
                    pg, st = losses.ppo_policy_loss(logp, old_token_logps(chunk, logp.shape[1], device), weights, adv,
                                                    cfg.clip, cfg.ratio_guard, cfg.ratio)
                    action_loss = pg.mean()
                    value_loss = losses.clipped_value_loss(value, old_value, ret, cfg.value_clip).mean()
                    # warm-up: L_π weighs 0 but stays in the graph, so DDP sees a gradient (zeros) for every
                    # parameter; Adam's moments stay 0 and the model does not move (detached head input)
                    loss = cfg.value_coef * value_loss + (0.0 if warmup else 1.0) * action_loss
                    if cfg.entropy_coef > 0 and not warmup:
                        loss = loss - cfg.entropy_coef * entropy.mean()
                    # the mean over the optimiser step's samples (micro-batches of whole conversations,
                    # shuffle: episodes, differ in size; equal sizes give the mean of the micro-batch means)
                    acc.backward(loss * len(chunk) / n_step)
                    if last and (norm := run.optimizer_step()) is not None:
                        grad_norms.append(norm)
                k = len(chunk)
                sums["n"] += k
                sums["action_loss"] += float(action_loss.detach()) * k
                sums["value_loss"] += float(value_loss.detach()) * k
                for key in POLICY_STATS:
                    sums[key] += float(st[key].sum())
                if entropy is not None:
                    sums["entropy"] += float(entropy.detach().sum())
        if say:
            say(f"epoch {epoch + 1}/{cfg.epochs} done at {time.perf_counter() - t0:.1f} s")
    # the epochs' decoder input tokens, taken out of the loss sums by update_metrics
    sums["epoch_tokens"], sums["epoch_padded_tokens"] = counts.get("tokens", 0.0), counts.get("padded", 0.0)
    return sums, grad_norms


def update_metrics(cfg: PPOConfig, run: Run, upd: Update, feed: EpisodeFeed, sums: dict[str, float],
                   grad_norms: list[float], lr: float, t0: float, vision_cache: Any, suite: Any) -> dict[str, float]:
    """5. The reference's metrics (``docs/rl.md`` defines each), combined over processes."""
    n_samples = len(upd.flat)
    feed.counters["env_steps"] += n_samples
    feed.counters["episodes_done"] += len(upd.finished)
    sums = dict(sums)
    # decoder input tokens (real and padded) of the scoring pass and of all epochs: with the phases'
    # seconds, the tokens/s and achieved FLOP/s of the update (benchmarks/rl_speed.py)
    token_metrics = {"train/epoch_tokens": sums.pop("epoch_tokens"),
                     "train/epoch_padded_tokens": sums.pop("epoch_padded_tokens"),
                     "train/score_tokens": upd.score_counts.get("tokens", 0.0),
                     "train/score_padded_tokens": upd.score_counts.get("padded", 0.0)}
    metrics = {**rl_common.ppo_loss_metrics(sums, cfg.ratio), **token_metrics}
    metrics.update(stats("rollout/step_reward", upd.rewards))
    metrics.update(stats("rollout/value", upd.values))
    metrics.update(stats("rollout/return", upd.returns))
    metrics.update(stats("rollout/advantage", upd.advantages))
    metrics["value/explained_variance"] = losses.explained_variance(upd.values.flatten(), upd.returns.flatten())
    metrics.update(rl_common.answer_metrics(suite, [s.trajectory.responses[s.turn] for row in upd.steps for s in row]))
    metrics.update(episode_metrics(upd.finished))
    metrics.update(reward_component_metrics(upd.finished))
    elapsed = time.perf_counter() - t0
    metrics.update({"train/lr": lr, "train/collect_seconds": upd.t_collect, "train/update_seconds": elapsed,
                    "train/samples_per_minute": 60.0 * n_samples / max(1e-9, time.perf_counter() - t0),
                    "charts/env_steps": feed.counters["env_steps"], "charts/episodes": feed.counters["episodes_done"],
                    "charts/update_samples": float(n_samples),
                    # what `shuffle: episodes` can pack: samples per conversation (segment) of this update; a
                    # conversation cut by the update boundary counts once per update it spans
                    "rollout/samples_per_conversation": n_samples / max(1, len(set(conversation_ids(upd.flat))))})
    metrics.update(vision_cache_metrics(vision_cache))
    metrics.update({f"train/{k}_seconds": v for k, v in upd.seconds.items()})  # where the rollout went
    if grad_norms:
        metrics["train/grad_norm"] = float(np.mean(grad_norms))
    return reduce_metrics(run.accelerator, metrics, sum_prefixes=("charts/", "train/samples_per_minute", "episodes/count",
                                                                 *token_metrics),
                          weights={"episodes/": "episodes/count", "rewards/": "episodes/count"})


# ------------------------------------------------------------------------------------------ train
def train(cfg: PPOConfig, stop_after: int | None = None, prebuilt: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Run PPO; returns the final summary (also ``OUTPUT/summary.json``). ``stop_after`` ends the run
    after that many updates as if killed (no final save) — how the tests check exact resume. ``prebuilt``
    = ``(model, processor)`` built by the caller replaces ``cfg.model.path`` (the speed benchmark's random
    11B-sized model, never written to disk)."""
    notices = rl_common.adopt_model_image_sizes(cfg) if prebuilt is None else []  # before config.json is written
    run = Run(cfg, cfg.micro_batch_size, rl=True)
    acc, out, rank = run.accelerator, run.out, run.rank
    for line in notices:
        acc.print(line)

    # --- task: this process's endless stream of episodes
    suite, options, episodes = task_episodes(cfg.task)

    # --- model + value head (one module, so DeepSpeed/FSDP see a single model), optimiser
    model, processor, model_meta = run.load_model(prebuilt)
    model_type = model.config.model_type
    model = prepare_trainable(model, cfg.model, ratio_exact=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)  # the same head on every process
        model.value_head = ValueHead(hidden_size_of(model), tuple(cfg.value_head_widths))  # trained and checkpointed
    run.export_skip = ("value_head.",)  # ... but not in the HF exports: it ships beside them (value_head.save)
    model, optimizer = run.prepare(model)
    period = cfg.lr_max_steps if cfg.lr_max_steps > 0 else cfg.updates  # cosine T_max, stepped once per update
    unwrapped = acc.unwrap_model(model)
    head = unwrapped.value_head
    merged = merged_rollout(cfg.sampling, unwrapped)
    turns = TurnTokenizer(processor, model_type)
    sampling = SamplingParams(temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
                              max_new_tokens=cfg.sampling.max_new_tokens)
    pool = EnvPool(suite, options, turns, cfg.num_envs, cfg.task.max_turns, cfg.task.max_tokens, env_threads(cfg.task),
                   sample=sample_segments, prefix_cache=cfg.sampling.prefix_cache)
    feed = EpisodeFeed(pool, episodes, episode_sampler(len(episodes), cfg.seed, rank, run.world))

    # --- resume: weights/optimiser/RNG via accelerate, in-flight episodes via the feed's own file
    def rollout_file(at: int) -> Path:
        return out / ROLLOUT_DIR / f"update-{at:06d}-rank-{rank}.pt"

    state = run.resume({"num_envs": cfg.num_envs})
    update = int(state["update"]) if state is not None else 0
    if state is not None:
        if not rollout_file(update).is_file():
            raise DataError(f"{rollout_file(update)}: missing; the checkpoint has no rollout state for rank {rank}")
        feed.restore(rollout_file(update))
    run.start_tracker(update, {"setup/episodes": len(episodes), "setup/resumed_from_update": update})

    def save(at: int) -> None:
        feed.save(rollout_file(at))  # first: a checkpoint folder without it is never complete
        path = run.checkpoint(at, {"update": at, "num_envs": cfg.num_envs})
        if acc.is_main_process:
            head.save(path / "hf")
            kept = {p.name for p in list_checkpoints(out)}
            for f in (out / ROLLOUT_DIR).glob("update-*.pt"):
                if f"step-{f.name.split('-')[1]}" not in kept:
                    f.unlink(missing_ok=True)
        acc.wait_for_everyone()

    last: dict[str, float] = {}
    first_update = update
    while update < cfg.updates and not run.out_of_time():
        t0 = time.perf_counter()
        chatty = update == first_update or (update + 1) % max(1, cfg.logging.every) == 0
        say = (lambda text, u=update: run.phase(u + 1, text)) if chatty else None
        # 1. collect with the in-training model (eval mode, no grad)
        unwrapped.eval()
        generator = rollout_generator(cfg.seed, rank, update, acc.device)  # sampling runs on the model's device
        vision_cache = rollout_vision_cache(unwrapped, cfg.sampling)
        with acc.autocast():
            upd = collect(cfg, feed, rollout_model(merged, unwrapped), sampling, generator, vision_cache, say)
        # 2. score; 3. GAE
        vision = scoring_vision(vision_cache, model, unwrapped)  # the same for scoring and training
        with profile_window(cfg.profile_update == update + 1, out, update + 1, acc.device, acc.is_main_process):
            with acc.autocast():
                next_value = score(cfg, run, upd, unwrapped, head, turns, pool, vision)
            if say:
                say(f"scored {len(upd.flat)} steps in {time.perf_counter() - t0 - upd.t_collect:.1f} s")
            advantages(cfg, upd, next_value)
            # 4. PPO epochs
            lr = run.set_lr(update / period, 1.0 / period)
            sums, grad_norms = optimise(cfg, run, upd.flat, head, turns, update, vision, say, t0)
        update += 1
        # 5. metrics, eval, checkpoint
        last = update_metrics(cfg, run, upd, feed, sums, grad_norms, lr, t0, vision_cache, suite)
        ending = run.is_last(update, cfg.updates)
        if update % max(1, cfg.logging.every) == 0 or ending:
            run.log(update, last)
        if run.after_update(update, ending, save, stop_after):
            break

    # --- end
    pool.close()
    summary = {"update": update, "updates": cfg.updates, "finished": update >= cfg.updates, "last": last}
    return run.end(update, summary, save, {**model_meta, "trained_by": "spatialrl train ppo"},
                   export_extra=head.save)  # the critic ships beside the exported model
