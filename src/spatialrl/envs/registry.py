"""Task suites: how the generic rollout / eval / training code meets a task, without naming it.

A task (TVR, V-IRL, GeneralPoints) registers one :class:`TaskSuite` in its ``envs/<task>/suite.py``.
Algorithms and the eval runner only ever talk to a suite, never ``if task == "virl"``.

The contract with the env (a ``gymnasium.Env`` whose action is the model's raw text):

* ``env.reset(seed=spec.seed, options=spec.reset_options)`` starts the episode ``spec``.
* every ``info`` (from reset and step) carries
  - ``"expert_response"``: the exact text the expert answers in this state (the SFT target),
  - ``"candidate_responses"``: well-formed answers a random agent samples from,
  - ``"record"``: a JSON-able dict of per-step fields worth logging (pose, validity, ...).
* the ``info`` of the final step (terminated or truncated) carries ``"episode"``: a JSON-able dict of
  per-episode fields (``success`` at least) that ``TaskSuite.summarize`` turns into metrics.

A suite that can batch also gives ``make_vector_env(options, n)`` (``spatialrl.envs.vector`` states what
the rollout core needs of it); the core then steps every slot of a turn through that one vector env, with
the same per-slot results as ``n`` single envs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from spatialrl.conversation import Conversation
from spatialrl.errors import SpatialRLError

# (task options, the env's info at this step, the expert's answer) -> the thought before the answer.
ThoughtFn = Callable[[dict[str, Any], dict[str, Any], str], str]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run: a unique id, the category its metrics are grouped under, how to reset."""

    episode_id: str
    category: str
    reset_options: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None


class Prompter(Protocol):
    """Turns one episode so far into chat messages. One instance per episode (it holds the memory)."""

    def reset(self, obs: Any, info: dict[str, Any]) -> None: ...

    def update(self, response: str, obs: Any, info: dict[str, Any]) -> None:
        """Record the model's ``response`` and the env's answer to it (next ``obs``/``info``)."""

    def messages(self) -> Conversation:
        """The conversation to send to the policy for the next turn."""


@dataclass(frozen=True)
class TaskSuite:
    """Everything the generic runner needs to evaluate or train on one task.

    ``options`` is the task's own argument dict (data path, split, memory mode, image size, ...),
    parsed from the CLI's ``--data``, ``--split`` and ``--set key=value`` flags.
    """

    name: str
    description: str
    make_env: Callable[[dict[str, Any]], gym.Env]
    make_prompter: Callable[[dict[str, Any]], Prompter]
    episodes: Callable[[dict[str, Any]], list[EpisodeSpec]]
    summarize: Callable[[list[dict[str, Any]]], dict[str, dict[str, float]]]
    # Optional report hook: (episode record, its step records, options, asset dir) -> HTML fragment.
    render_episode: Callable[[dict[str, Any], list[dict[str, Any]], dict[str, Any], Any], str] | None = None
    # Optional extra writer after a run (e.g. the V-IRL reference JSONL layout): (run dir, options) -> None.
    after_run: Callable[[Any, dict[str, Any]], None] | None = None
    # Optional human-play hook (web page): (obs, info) -> {"images": [{"label", "image"}], "texts":
    # [{"label", "text"}], "actions": [{"label", "response", "key"}]}. Buttons send `response` verbatim.
    human_view: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None
    default_options: dict[str, Any] = field(default_factory=dict)
    # True when separate env instances may step concurrently in threads (no shared GL context etc.).
    thread_safe_envs: bool = False
    # Optional reasoning template for CoT SFT data: (options, info, expert answer) -> a first-person thought
    # that leads to the answer (never containing the answer syntax itself); see ``envs/<task>/thoughts.py``.
    thought: ThoughtFn | None = None
    # Optional regex whose group 1 is the action in an answer (case-insensitive): the default of GRPO's
    # gated single-turn reward (``single.reward.action_pattern``) on this task.
    action_pattern: str | None = None
    # Optional ``info["record"]`` field naming the state an action was taken in: the default anchor of
    # GRPO's per-step groups (``anchor_field``) on this task.
    anchor_field: str | None = None
    # Optional batching capability: (options, n) -> a Gymnasium VectorEnv of n envs equal to n
    # ``make_env(options)`` envs (Disabled autoreset, ``reset_mask``/``per_env`` resets, ``None`` actions
    # skip an env; the contract is in ``spatialrl.envs.vector``), or None to not batch with these options.
    # When it gives one, the rollout core (eval runner, RL loops) steps all slots through it in one call.
    make_vector_env: Callable[[dict[str, Any], int], Any] | None = None
    # Optional answer statistics: (a rollout's sampled answers) -> {name: value}, logged by the RL
    # trainers as ``rollout/answer_<name>`` (V-IRL: the share of answers in each action vocabulary).
    answer_stats: Callable[[list[str]], dict[str, float]] | None = None


_SUITES: dict[str, TaskSuite] = {}
# Modules that register a suite on import; imported lazily so `spatialrl --help` stays fast.
_SUITE_MODULES = {
    "tvr": "spatialrl.envs.tvr.suite",
    "virl": "spatialrl.envs.virl.suite",
    "gp": "spatialrl.envs.gp.suite",
}


def check_option_values(task: str, options: dict[str, Any], defaults: dict[str, Any],
                        choices: dict[str, tuple[Any, ...]] | None = None,
                        minimum: dict[str, float] | None = None) -> None:
    """Check ``--set`` values against the type of each option's default, its allowed ``choices`` and its
    ``minimum``: one error naming the option and what it accepts (before any run folder is made).
    Options whose default is None (free-form, checked by the suite) are not type-checked here."""
    import math

    from spatialrl.errors import DataError

    for key, value in options.items():
        allowed = (choices or {}).get(key)
        if allowed is not None:
            if value not in allowed:
                raise DataError(f"{task} option {key}={value!r}: expected one of {', '.join(map(str, allowed))}")
            continue
        default = defaults.get(key)
        if default is None:
            continue
        if isinstance(default, bool):
            ok, want = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            want = "a finite number"
        elif isinstance(default, str):
            ok, want = isinstance(value, str), "a string"
        else:
            continue
        low = (minimum or {}).get(key)
        if ok and low is not None and value < low:
            ok = False
        if not ok:
            bound = f" >= {low:g}" if low is not None else ""
            raise DataError(f"{task} option {key}={value!r}: expected {want}{bound} (default {default!r})")


class UnknownTask(SpatialRLError, KeyError):
    """``--task`` (or a config's task name) names no registered suite."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def register_suite(suite: TaskSuite) -> TaskSuite:
    _SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> TaskSuite:
    if name not in _SUITES:
        module = _SUITE_MODULES.get(name)
        if module is None:
            raise UnknownTask(f"unknown task {name!r}; known tasks: {', '.join(sorted(_SUITE_MODULES))}")
        import importlib

        importlib.import_module(module)
    return _SUITES[name]


def task_names() -> list[str]:
    return sorted(_SUITE_MODULES)
