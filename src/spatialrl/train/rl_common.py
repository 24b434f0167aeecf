"""Pieces PPO and GRPO share that are not tensor math (that is ``losses.py``): the image sizes a run
takes from the model it starts from, the value head's input (detached or not), and the task suite's
answer statistics as rollout metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# The task options that fix what the model sees (TVR frame size, V-IRL grid, GeneralPoints table side).
# A model folder records the values it was trained with (``spatialrl_model.json`` → ``eval``).
IMAGE_OPTION_KEYS = ("width", "height", "grid_size", "resolution")


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


def answer_metrics(suite: Any, answers: list[str], prefix: str = "rollout/answer_") -> dict[str, float]:
    """The task suite's statistics of a rollout's sampled answers (``TaskSuite.answer_stats``; V-IRL:
    the share in each action vocabulary), as ``<prefix><key>``; nothing for a suite without the hook."""
    if suite.answer_stats is None or not answers:
        return {}
    return {f"{prefix}{k}": float(v) for k, v in suite.answer_stats(answers).items()}
