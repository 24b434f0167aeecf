"""Pieces of the RL trainers that are not tensor math (that is ``losses.py``): the image sizes a run
takes from the model it starts from, the value head's input (detached or not), PPO's epoch order, and
the task suite's answer statistics as rollout metrics, PPO's loss and clip-fraction metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# The task options that fix what the model sees (TVR frame size and layout — two images or one joined
# side-by-side image —, V-IRL grid, GeneralPoints table side). A model folder records the values it was
# trained with (``spatialrl_model.json`` → ``eval``); a joined-frame model rolled out on two images would
# see inputs it never trained on.
IMAGE_OPTION_KEYS = ("width", "height", "frames", "grid_size", "resolution")


def model_agent(path: str) -> str | None:
    """``cfg.model.path`` as an eval agent name whose recorded settings can be read: ``builtin:NAME``
    as is, a model folder as ``hf:PATH``; None for a fresh ``preset:``."""
    if path.startswith("builtin:"):
        return path
    if path.startswith("preset:") or not Path(path).expanduser().is_dir():
        return None
    return f"hf:{Path(path).expanduser()}"


def adopt_model_image_sizes(cfg: Any) -> list[str]:
    """The one rule for image sizes in RL recipes: where ``task.options`` / ``eval.options`` leave an
    image option (``IMAGE_OPTION_KEYS``) unset and ``model.path`` is a ``builtin:`` or model folder whose
    ``spatialrl_model.json`` records evaluation settings for that task, the recorded value is used — RL
    then sees the frames the model was trained and is evaluated on. A value the recipe sets is kept; where
    it differs from the model's, a notice says so. Changes ``cfg`` in place; returns the lines to print."""
    from spatialrl.models.builtin import model_eval_settings

    agent = model_agent(cfg.model.path)
    settings = model_eval_settings(agent) if agent is not None else None
    if settings is None:
        return []
    recorded = {k: v for k, v in settings.get("options", {}).items() if k in IMAGE_OPTION_KEYS}
    lines = []
    for block, task in (("task", cfg.task.name), ("eval", cfg.eval.task)):
        if task != settings["task"] or not recorded:
            continue
        options = getattr(cfg, block).options
        adopted = {k: v for k, v in recorded.items() if k not in options}
        differ = {k: options[k] for k, v in recorded.items() if k in options and options[k] != v}
        options.update(adopted)
        if adopted:
            lines.append(f"{block}.options: {_pairs(adopted)} from {cfg.model.path} (its recorded image size)")
        if differ:
            lines.append(f"{block}.options: {_pairs(differ)} kept as the recipe sets them; {cfg.model.path} was "
                         f"trained and is evaluated at {_pairs({k: recorded[k] for k in differ})}")
    return lines


def _pairs(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def critic_head(head: Any, detach: bool) -> Callable[[Any], Any]:
    """The value head as ``score_tokens`` calls it. ``detach``: on a detached hidden state, so the value
    loss trains the head only and no gradient of it reaches the shared model (detached critic; also
    what keeps the policy frozen during critic warm-up)."""
    if not detach:
        return head
    return lambda hidden: head(hidden.detach())


def _conversations(groups: list[int]) -> list[list[int]]:
    """Sample indices by conversation, in order of first appearance (``groups``: each sample's conversation)."""
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    return list(members.values())


def _fill(units: list[list[int]], size: int) -> list[list[int]]:
    """``size`` units (single samples or whole conversations) per micro-batch, in the given order."""
    return [[i for unit in units[lo:lo + size] for i in unit] for lo in range(0, len(units), size)]


def scoring_micro_batches(groups: list[int], size: int, shuffle: str) -> list[list[int]]:
    """The scoring pass's micro-batches of sample indices: ``[0, size)``, ``[size, 2·size)``, ...; with
    ``shuffle: episodes``, ``size`` whole conversations each (``groups``: each sample's conversation)."""
    units = _conversations(groups) if shuffle == "episodes" else [[i] for i in range(len(groups))]
    return _fill(units, size)


def epoch_micro_batches(n: int, size: int, shuffle: str, rng: np.random.Generator,
                        groups: list[int] | None = None) -> list[list[int]]:
    """One epoch's micro-batches of sample indices. ``samples``: a fresh permutation cut into batches;
    ``batches``: the scoring pass's batches (``[0, size)``, ``[size, 2·size)``, ...) in shuffled order;
    ``episodes``: the scoring pass's micro-batches of ``size`` whole conversations (``groups``: each
    sample's conversation) in shuffled order — a conversation's turns share one row of one forward pass,
    and, as with ``batches``, every training forward has the exact rows and padding that fixed π_old."""
    if shuffle == "samples":
        return _fill([[i] for i in rng.permutation(n).tolist()], size)
    if shuffle == "episodes" and (groups is None or len(groups) != n):
        raise ValueError("shuffle 'episodes' needs each sample's conversation (groups)")
    scoring = scoring_micro_batches(groups if shuffle == "episodes" else list(range(n)), size, shuffle)
    return [scoring[i] for i in rng.permutation(len(scoring)).tolist()]


def answer_metrics(suite: Any, answers: list[str], prefix: str = "rollout/answer_") -> dict[str, float]:
    """The task suite's statistics of a rollout's sampled answers (``TaskSuite.answer_stats``; V-IRL:
    the share in each action vocabulary), as ``<prefix><key>``; nothing for a suite without the hook."""
    if suite.answer_stats is None or not answers:
        return {}
    return {f"{prefix}{k}": float(v) for k, v in suite.answer_stats(answers).items()}


def ppo_loss_metrics(sums: dict[str, float], ratio: str) -> dict[str, float]:
    """PPO's ``losses/*`` (per-sample means of the epochs' sample-summed statistics) and clip fractions:
    ``ppo/clip_fraction_sequence`` (share of samples whose sequence ratio left 1 ± ε),
    ``ppo/clip_fraction_token`` (share of answer tokens whose own ratio did), and ``ppo/clip_fraction``
    (= ``losses/clipfrac``), the one of the ``ratio`` variant in use; the k3 KL of both ratios whatever
    the variant: ``ppo/approx_kl_sequence`` (per sample) and ``ppo/approx_kl_token`` (per answer token)."""
    sums = dict(sums)
    n = max(1.0, sums.pop("n"))
    tokens = max(1.0, sums.pop("tokens"))
    clipped = {"sequence": sums.pop("clipped_sequence") / n, "token": sums.pop("clipped_tokens") / tokens}
    kl = {"sequence": sums.pop("kl_sequence") / n, "token": sums.pop("kl_tokens") / tokens}
    out = {f"losses/{k}": v / n for k, v in sums.items()}
    out.update({"ppo/clip_fraction": clipped[ratio], "losses/clipfrac": clipped[ratio],
                "ppo/clip_fraction_sequence": clipped["sequence"], "ppo/clip_fraction_token": clipped["token"],
                "ppo/approx_kl_sequence": kl["sequence"], "ppo/approx_kl_token": kl["token"]})
    return out
