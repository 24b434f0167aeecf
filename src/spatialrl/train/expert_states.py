"""Single-turn GRPO's material: per-step expert prompts (through the eval runner, so prompts equal
eval's), TVRBench's gated reward on them, and the held-out action-match diagnostic."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from spatialrl.agents.base import Conversation, SamplingParams
from spatialrl.errors import DataError
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import sample_segments
from spatialrl.train.rl_config import GatedRewardConfig, GRPOConfig


def gated_reward(response: str, expert_response: str, cfg: GatedRewardConfig) -> tuple[float, dict[str, float]]:
    """TVRBench's single-turn reward: no parsable action → ``no_format`` (lowest); a parsable action
    that differs from the expert's → ``wrong_action``; the expert's action → ``match`` (highest).
    Actions compare case-insensitively after stripping."""
    if cfg.action_pattern is None:
        raise DataError("single.reward.action_pattern: not set and not resolved from a task (GRPO's train() "
                        "fills it from TaskSuite.action_pattern)")
    pattern = re.compile(cfg.action_pattern, re.IGNORECASE | re.DOTALL)
    mine, gold = pattern.search(response), pattern.search(expert_response)
    if gold is None:
        raise DataError(f"single.reward.action_pattern {cfg.action_pattern!r} does not parse the expert's "
                        f"answer {expert_response[:80]!r}; set the task's action pattern")
    if mine is None:
        return cfg.no_format, {"format": 0.0, "match": 0.0}
    match = mine.group(1).strip().lower() == gold.group(1).strip().lower()
    return (cfg.match if match else cfg.wrong_action), {"format": 1.0, "match": float(match)}


@dataclass
class ExpertPrompt:
    """One per-step prompt of an expert episode: what the policy saw and what the expert answered."""

    conversation: Conversation
    expert_response: str
    category: str
    episode_id: str


def expert_prompts(suite: Any, options: dict[str, Any], episodes: list[Any]) -> list[ExpertPrompt]:
    """Flatten expert episodes into per-step prompts, through the eval runner (same prompts as eval)."""
    from spatialrl.agents.expert import ExpertPolicy
    from spatialrl.rollout.runner import run_episodes

    prompts: list[ExpertPrompt] = []

    def keep(spec, conversation, generation, _step) -> None:
        prompts.append(ExpertPrompt(list(conversation), generation.text, spec.category, spec.episode_id))

    run_episodes(suite, options, ExpertPolicy(), episodes, batch_size=8, progress=False, on_turn=keep)
    if not prompts:
        raise DataError(f"task {suite.name}: the expert episodes produced no prompts")
    return prompts


@torch.no_grad()
def action_match(turns: TurnTokenizer, prompts: list[ExpertPrompt], model: Any, max_new_tokens: int,
                 reward_cfg: GatedRewardConfig, batch: int) -> dict[str, float]:
    """Greedy answers to held-out expert states: ``diag/action_match`` (share whose action equals the
    expert's, by ``single.reward.action_pattern``) and ``diag/format`` (share with a parsable action)."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    hits = fmt = 0.0
    for lo in range(0, len(prompts), batch):
        chunk = prompts[lo:lo + batch]
        answers = sample_segments(model, turns, [turns.start(p.conversation) for p in chunk], greedy, None)
        for p, (ids, _) in zip(chunk, answers, strict=True):
            _, parts = gated_reward(turns.tokenizer.decode(ids, skip_special_tokens=True), p.expert_response, reward_cfg)
            hits, fmt = hits + parts["match"], fmt + parts["format"]
    n = max(1, len(prompts))
    return {"diag/action_match": hits / n, "diag/format": fmt / n, "diag/states": float(len(prompts))}


def heldout_prompts(cfg: GRPOConfig, suite: Any, options: dict[str, Any]) -> list[ExpertPrompt]:
    """The held-out expert states of the action-match diagnostic (none when it is off)."""
    if cfg.action_match.every <= 0:
        return []
    held_options = {**options, **cfg.action_match.options}
    if cfg.action_match.split is not None:
        held_options["split"] = cfg.action_match.split
    return expert_prompts(suite, held_options, suite.episodes(held_options)[: cfg.action_match.episodes])
