"""Typed configs of the RL trainers (PPO, GRPO), built on the shared blocks of ``train/config.py``.

Each default names its source: SFTvsRL's ``rl/configs/llama_virl_*.yaml`` + training scripts (PPO) and
TVRBench's ``scripts/run_online_rl.sh`` / verl defaults (GRPO); ``spec/training.md`` lists them all.
No torch import here, so ``spatialrl train ppo --help-config`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from spatialrl.train.config import (
    CheckpointConfig,
    ClosedLoopEvalConfig,
    ConfigError,
    LoggingConfig,
    ModelConfig,
    OptimConfig,
    check_task_name,
)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class RLTaskConfig:
    name: str = field(default="tvr", metadata=_help("Task suite to train on (tvr, virl, gp)."))
    data: str | None = field(default=None, metadata=_help("Task data (TVR bench folder, V-IRL dataset folder)."))
    split: str | None = field(default=None, metadata=_help("Training split (task-specific, e.g. TVR 'rl')."))
    options: dict[str, Any] = field(default_factory=dict, metadata=_help("Extra task options, as `spatialrl eval --set`."))
    limit: int = field(default=0, metadata=_help("Use only the first N episodes of the split (0 = all)."))
    max_turns: int = field(default=30, metadata=_help("Turn cap per episode, a safety net (TVRBench agent loop: 30)."))
    max_tokens: int = field(
        default=16384,
        metadata=_help("Token cap of one segment (prompt + all turns + the next answer); beyond it the episode "
                       "is cut (TVRBench's response budget; longest TVR VA sample ≈ 13k tokens)."),
    )
    env_threads: int = field(default=0, metadata=_help(
        "Threads stepping a turn's envs, for suites whose envs are thread-safe (V-IRL); 0 = one per CPU "
        "core. Results do not depend on it."))

    def __post_init__(self) -> None:
        check_task_name(self.name, "name")


@dataclass
class SamplingConfig:
    temperature: float = field(default=1.0, metadata=_help("Sampling temperature; log-probs use logits / temperature."))
    top_p: float = field(default=1.0, metadata=_help("Nucleus sampling mass."))
    max_new_tokens: int = field(default=64, metadata=_help("Answer budget per turn."))
    max_batch_size: int = field(default=0, metadata=_help("Largest generate() batch (0 = all active slots at once)."))
    vision_cache_mb: float = field(default=1024, metadata=_help(
        "Image-feature cache of one update's rollouts, in MB (Qwen families; 0 = off): each frame of a "
        "multi-turn episode goes through the vision tower once instead of every turn."))
    kv_cache: str = field(default="dynamic", metadata=_help(
        "KV cache of rollout generation: 'dynamic' (eager decoding) or 'static' (fixed shapes, which "
        "generate() compiles with torch.compile on a GPU; batches are filled to max_batch_size and "
        "prompts left-padded to a multiple of 256 tokens to keep recompiles few)."))
    prefix_cache: bool = field(default=False, metadata=_help(
        "Multi-turn rollouts keep each slot's KV cache between turns, so a turn prefills only the tokens "
        "added since (Qwen-VL and Mllama families; with kv_cache=dynamic). Same tokens and log-probs as "
        "re-prefilling (tests/models/test_prefix_cache.py); off until measured on a GPU (docs/rl.md)."))
    merge_lora: bool = field(default=False, metadata=_help(
        "With model.lora: sample rollouts from a copy of the model with the adapters merged into its weights "
        "(refreshed every update; one more copy of the language model in memory), so decoding skips the "
        "adapters' extra kernels. Sampling log-probs then differ in the last bits; no loss uses them."))


# The run-control fields PPO and GRPO share (make_optimizer reads them from either config).
def _optimizer_offload_field() -> Any:
    return field(default=False, metadata=_help(
        "Keep AdamW's moments and fp32 master weights in CPU memory (train/offload.py): 4 GPU bytes per "
        "parameter instead of 12-16. Single process without DeepSpeed; under DeepSpeed use "
        "configs/accelerate/zero2_offload_*.yaml instead."))


def _disable_dropout_field() -> Any:
    return field(default=True, metadata=_help(
        "Set every dropout of the policy to 0 (LoRA's lora_dropout included), as TRL's PPO/GRPO do: the ratio "
        "compares a training forward with the scoring pass's eval-mode one, and dropout in the first is "
        "noise in the ratio (and in the clipping). False keeps the model's dropout."))


def _profile_update_field() -> Any:
    return field(default=0, metadata=_help(
        "Profile update K's scoring and training passes (not the rollout) with torch.profiler and write "
        "profile-update-K.json/.txt into the run folder: kernel time by kind, busy share, top kernels "
        "(train/profiling.py). 0 = off. The profiled update itself runs slower."))


def _offload_master_field() -> Any:
    return field(default=True, metadata=_help(
        "With optimizer_offload: keep an fp32 master copy of the weights on the host (12 host bytes per "
        "parameter); false = 8 bytes, updates below bf16's resolution are lost (an 11B model on a 128 GB host)."))


def _rl_optim(lr: float, eps: float, max_grad_norm: float) -> OptimConfig:
    return OptimConfig(lr=lr, eps=eps, weight_decay=0.0, schedule="cosine", warmup_ratio=0.0,
                       min_lr_ratio=0.0, max_grad_norm=max_grad_norm)


def _time_budget_field() -> Any:
    return field(default=0.0, metadata=_help(
        "End the run after this much training time, counted across resumes (0 = no budget): last checkpoint, "
        "final model and eval as at the last update. Not bit-reproducible."))


# ------------------------------------------------------------------------------------------- PPO
@dataclass
class PPOConfig:
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"ppo_epochs": "epochs", "minibatch_size": "micro_batch_size",
                                              "time_limit_minutes": "time_budget_minutes"}

    output_dir: str = field(default="runs/ppo", metadata=_help("Checkpoints, logs, final model."))
    seed: int = field(default=42, metadata=_help("Seeds everything; each process draws its episodes and samples from (seed, rank) (SFTvsRL: seed 42 + rank)."))
    updates: int = field(default=15, metadata=_help("PPO updates (SFTvsRL V-IRL scripts: 15)."))
    num_envs: int = field(default=8, metadata=_help("Env slots per process, stepped together with one batched "
                                                    "generate (the reference ran 1)."))
    num_steps: int = field(default=256, metadata=_help("Env steps collected per process per update (all slots "
                                                       "together; SFTvsRL: 256). Must divide by num_envs."))
    epochs: int = field(default=4, metadata=_help("Passes over the collected steps per update (SFTvsRL ppo_epoch 4)."))
    micro_batch_size: int = field(default=1, metadata=_help("Steps per forward pass (SFTvsRL mini_batch_size: 1)."))
    grad_accum: int = field(default=128, metadata=_help("Forward passes per optimiser step (SFTvsRL: 128)."))
    shuffle: str = field(
        default="samples",
        metadata=_help("Epoch order: 'samples' (shuffle steps into new micro-batches), 'batches' (keep the "
                       "scoring pass's micro-batches whole, shuffle their order: each training forward then has "
                       "the exact shapes that fixed π_old; bf16 on a GPU changes numerics with batch shape) or "
                       "'episodes' (the scoring pass's micro-batches of micro_batch_size whole conversations, their "
                       "order shuffled: a conversation's turns are scored in one row, its shared prefix computed "
                       "once, with the shapes that fixed π_old)."),
    )
    clip: float = field(default=0.1, metadata=_help("PPO ratio clip ε (SFTvsRL clip_param 0.1)."))
    ratio: Literal["sequence", "token"] = field(
        default="sequence",
        metadata=_help("Where the ratio is taken: 'sequence' = one ratio of the whole answer's weighted "
                       "log-prob (SFTvsRL); 'token' = one ratio per answer token, the clipped surrogate "
                       "averaged over the answer's tokens (thought tokens weighted thought_prob_coef; TRL/verl)."),
    )
    critic_warmup: int = field(default=0, metadata=_help(
        "Value-only updates at the start of the run: the value head learns the returns while the policy "
        "is frozen (policy loss weighted 0, head input detached: the model's gradients are zeros). They "
        "count among `updates`."))
    detach_critic: bool = field(default=False, metadata=_help(
        "Stop the value loss's gradient at the value head's input: the shared model learns from the "
        "policy loss only (the reference let both flow into it)."))
    value_clip: float = field(default=0.1, metadata=_help("Clip of the value change in the clipped value loss (0.1)."))
    value_coef: float = field(default=0.5, metadata=_help("Weight of the value loss (value_loss_coef 0.5)."))
    entropy_coef: float = field(
        default=0.0,
        metadata=_help("Entropy bonus weight. SFTvsRL's config says 0.01 but its code never used it: 0 = parity."),
    )
    gamma: float = field(default=0.9, metadata=_help("GAE discount γ (0.9)."))
    gae_lambda: float = field(default=0.95, metadata=_help("GAE λ (0.95)."))
    normalize_advantages: bool = field(default=True, metadata=_help("(A − mean)/(std + 1e-5) per process, as the reference."))
    ratio_guard: float | None = field(
        default=10.0, metadata=_help("Where the ratio exceeds this, use only the clipped term (reference: 10; null = off).")
    )
    thought_prob_coef: float = field(
        default=0.5, metadata=_help("Weight of the tokens before the action field in the action log-prob (RL4VLM 0.5).")
    )
    action_field: str = field(
        default='"action"',
        metadata=_help("Text that starts the action part of an answer (its last occurrence); tokens before it "
                       "are 'thought'. V-IRL/GP JSON: '\"action\"' / '\"formula\"'; TVR: 'Action:'."),
    )
    bootstrap_across_truncation: bool = field(
        default=False,
        metadata=_help("Reference quirk: a truncated (not terminated) step does not stop GAE, which then "
                       "bootstraps from the next episode's first value. Default: truncation ends the episode."),
    )
    lr_max_steps: int = field(default=20, metadata=_help("Cosine period T_max in updates (SFTvsRL: 20; 0 = updates)."))
    time_budget_minutes: float = _time_budget_field()
    optimizer_offload: bool = _optimizer_offload_field()
    offload_master_weights: bool = _offload_master_field()
    disable_dropout: bool = _disable_dropout_field()
    profile_update: int = _profile_update_field()
    value_head_widths: list[int] = field(default_factory=lambda: [1024, 512],
                                         metadata=_help("Hidden widths of the value MLP (reference: 1024, 512)."))
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=lambda: _rl_optim(lr=1e-6, eps=1e-7, max_grad_norm=0.01))
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.2, max_new_tokens=512))
    task: RLTaskConfig = field(default_factory=lambda: RLTaskConfig(name="virl"))
    checkpoint: CheckpointConfig = field(default_factory=lambda: CheckpointConfig(every=1))
    logging: LoggingConfig = field(default_factory=lambda: LoggingConfig(every=1))
    eval: ClosedLoopEvalConfig = field(default_factory=ClosedLoopEvalConfig)

    def __post_init__(self) -> None:
        _positive(self, "updates", "num_envs", "num_steps", "epochs", "micro_batch_size", "grad_accum")
        if self.num_steps % self.num_envs:
            raise ConfigError(f"num_steps ({self.num_steps}) must be a multiple of num_envs ({self.num_envs})")
        if self.shuffle not in ("samples", "batches", "episodes"):
            raise ConfigError(f"shuffle: expected 'samples', 'batches' or 'episodes', got {self.shuffle!r}")
        if self.sampling.temperature <= 0:
            raise ConfigError("sampling.temperature: PPO samples and scores with logits / temperature; must be > 0")
        if self.ratio not in ("sequence", "token"):
            raise ConfigError(f"ratio: expected 'sequence' or 'token', got {self.ratio!r}")
        if not 0 <= self.critic_warmup <= self.updates:
            raise ConfigError(f"critic_warmup: must be in [0, updates={self.updates}], got {self.critic_warmup}")
        if len(self.value_head_widths) != 2:
            raise ConfigError(f"value_head_widths: expected two widths, got {self.value_head_widths}")
        _check_common(self)


# ------------------------------------------------------------------------------------------- GRPO
@dataclass
class GatedRewardConfig:
    action_pattern: str | None = field(
        default=None,
        metadata=_help("Regex whose group 1 is the action (case-insensitive); None = the task's own "
                       "(TaskSuite.action_pattern: TVR's `Action: X` parser, V-IRL's JSON action field)."),
    )
    no_format: float = field(default=0.0, metadata=_help("Reward when the answer has no parsable action (lowest)."))
    wrong_action: float = field(default=0.1, metadata=_help("Reward for a parsable but wrong action (middle)."))
    match: float = field(default=1.0, metadata=_help("Reward when the action matches the expert's (highest)."))


@dataclass
class SingleTurnConfig:
    expert_episodes: int = field(default=0, metadata=_help("Expert episodes flattened into per-step prompts (0 = all)."))
    prompts_per_update: int = field(default=8, metadata=_help("Prompts per process per update (× group_size samples)."))
    reward: GatedRewardConfig = field(default_factory=GatedRewardConfig)


@dataclass
class ActionMatchConfig:
    every: int = field(default=0, metadata=_help("Score per-step action match on held-out expert states every N "
                                                 "updates (0 = never). TVRBench's diagnostic: single-turn GRPO "
                                                 "raised it while closed-loop success fell."))
    split: str | None = field(default=None, metadata=_help("Split of the held-out expert episodes (default: task.split)."))
    episodes: int = field(default=16, metadata=_help("Expert episodes flattened into held-out states."))
    options: dict[str, Any] = field(default_factory=dict, metadata=_help("Task options for them (default: task.options)."))


@dataclass
class GRPOConfig:
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"time_limit_minutes": "time_budget_minutes"}

    output_dir: str = field(default="runs/grpo", metadata=_help("Checkpoints, logs, final model."))
    seed: int = field(default=0, metadata=_help("Seeds everything; each process draws its tasks and samples from (seed, rank)."))
    mode: Literal["single", "multi"] = field(
        default="multi", metadata=_help("single = per-step expert prompts, gated reward; multi = live rollouts.")
    )
    updates: int = field(default=200, metadata=_help("Rollout + optimisation rounds."))
    tasks_per_update: int = field(default=8, metadata=_help("Tasks per process per update (TVRBench: 64 over 8 GPUs)."))
    group_size: int = field(default=8, metadata=_help("Trajectories (samples) per task/prompt, G (TVRBench rollout.n=8)."))
    mini_batches: int = field(default=4, metadata=_help("Optimiser steps per rollout batch (verl: train 64 / mini 16)."))
    micro_batch_size: int = field(default=2, metadata=_help("Sequences per forward pass (verl micro 2)."))
    epochs: int = field(default=1, metadata=_help("Passes over each rollout batch (verl ppo_epochs 1)."))
    clip: float = field(default=0.2, metadata=_help("Ratio clip ε (verl default 0.2)."))
    kl_coef: float = field(default=0.01, metadata=_help("β of the k3 KL to the frozen reference (TVRBench 0.01; 0 = no reference)."))
    entropy_coef: float = field(default=0.0, metadata=_help("Entropy bonus (TVRBench: 0)."))
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = field(
        default="token-mean", metadata=_help("Loss reduction (verl's agg_loss; token-mean is its default).")
    )
    scale_rewards: bool = field(default=True, metadata=_help("Divide group-centred rewards by the group std (GRPO); false = Dr. GRPO."))
    drop_zero_variance: bool = field(default=False, metadata=_help("Drop groups whose rewards are all equal (no signal)."))
    pose_anchored: bool = field(
        default=False,
        metadata=_help("GiGPO-style per-step credit: steps from identical anchor states across a task's G "
                       "trajectories form step groups; A = A_traj + step_weight · A_step."),
    )
    anchor_field: str | None = field(default=None, metadata=_help(
        "info['record'] field naming the state an action was taken in; None = the task's (TVR: prev_pose)."))
    step_weight: float = field(default=1.0, metadata=_help("Weight of the step advantage (GiGPO step_advantage_w 1.0)."))
    step_gamma: float = field(default=0.95, metadata=_help("Discount of step returns for step groups (GiGPO γ 0.95)."))
    geodesic_progress: bool = field(default=False, metadata=_help("TVR: progress reward on walking distance (task option distance=geodesic)."))
    time_budget_minutes: float = _time_budget_field()
    optimizer_offload: bool = _optimizer_offload_field()
    offload_master_weights: bool = _offload_master_field()
    disable_dropout: bool = _disable_dropout_field()
    profile_update: int = _profile_update_field()
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=lambda: _rl_optim(lr=1e-6, eps=1e-8, max_grad_norm=1.0))
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=64))
    task: RLTaskConfig = field(default_factory=RLTaskConfig)
    single: SingleTurnConfig = field(default_factory=SingleTurnConfig)
    action_match: ActionMatchConfig = field(default_factory=ActionMatchConfig)
    checkpoint: CheckpointConfig = field(default_factory=lambda: CheckpointConfig(every=100))
    logging: LoggingConfig = field(default_factory=lambda: LoggingConfig(every=1))
    eval: ClosedLoopEvalConfig = field(default_factory=ClosedLoopEvalConfig)

    def __post_init__(self) -> None:
        _positive(self, "updates", "tasks_per_update", "mini_batches", "micro_batch_size", "epochs")
        if self.group_size < 2:
            raise ConfigError(f"group_size: group-relative advantages need at least 2 samples per group, got {self.group_size}")
        if self.sampling.temperature <= 0:
            raise ConfigError("sampling.temperature: GRPO samples and scores with logits / temperature; must be > 0")
        if self.pose_anchored and self.mode == "single":
            raise ConfigError("pose_anchored: step groups need multi-turn trajectories; use mode=multi or turn it off")
        _check_common(self)


def _positive(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name}: must be >= 1, got {getattr(cfg, name)}")


def _check_common(cfg: Any) -> None:
    if cfg.profile_update < 0:
        raise ConfigError(f"profile_update: an update number >= 1, or 0 for off; got {cfg.profile_update}")
    if not cfg.time_budget_minutes >= 0:
        raise ConfigError(f"time_budget_minutes: must be >= 0, got {cfg.time_budget_minutes}")
    if cfg.checkpoint.keep_last < 1:
        raise ConfigError(f"checkpoint.keep_last: must be >= 1, got {cfg.checkpoint.keep_last}")
    if not 0.0 < cfg.sampling.top_p <= 1.0:
        raise ConfigError(f"sampling.top_p: must be in (0, 1], got {cfg.sampling.top_p}")
    if cfg.task.max_turns < 1 or cfg.task.max_tokens < 1:
        raise ConfigError("task.max_turns and task.max_tokens must be >= 1")
    if cfg.task.env_threads < 0:
        raise ConfigError(f"task.env_threads: must be >= 0 (0 = one per CPU core), got {cfg.task.env_threads}")
    if cfg.sampling.kv_cache not in ("dynamic", "static"):
        raise ConfigError(f"sampling.kv_cache: expected 'dynamic' or 'static', got {cfg.sampling.kv_cache!r}")
    if cfg.sampling.prefix_cache and cfg.sampling.kv_cache != "dynamic":
        raise ConfigError("sampling.prefix_cache: needs sampling.kv_cache=dynamic (a static cache has a fixed shape)")
