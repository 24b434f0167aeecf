"""Greedy decoding with a memory of what was tried: an episode-scoped rule that keeps a deterministic
policy out of loops.

Why. The shipped TVR AO model (test bench, 200 episodes, 2026-12-07) failed 119 episodes, and 118 of them
took the same action from the same pose twice (the first repeat at step 10, median) and then wandered to
the step limit: its stop rate equals its success rate (0.41) and it stopped in the wrong place once. A
greedy policy that comes back to a view with the same recent actions in its prompt answers as it did
before, so one return is enough to cycle for the rest of the episode.

The rule. The agent remembers, per episode, which answers it gave at each view it saw. A view is the last
image of the conversation's last user turn (hashed): identical poses render identical frames, and the
target half of a joined frame is fixed for the episode. When the model's greedy answer was already given
at this view, the candidate answers (``info["candidate_responses"]``) are scored by teacher forcing
(``models/answer_scores.py``) and the agent answers with the one maximising
``log p(answer) − penalty · times given here``. ``penalty=inf`` takes the most likely answer not yet given
at this view (the least-given one when all were); a finite penalty keeps a confident first choice. With
``penalty=0`` the rule is plain greedy decoding. It reads only what the agent itself has: its images and
its own answers; from the env info it takes only the episode's ``task_id`` and ``step`` to tell episodes
apart and see one start, never the pose.

It is a rule of greedy evaluation: it raises for sampled decoding, and for two conversations of one task
in the same call (GRPO groups), whose memories it could not tell apart.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, OrderedDict
from typing import Any

import numpy as np

from spatialrl.agents.base import Conversation, Generation, SamplingParams, images_of
from spatialrl.errors import SpatialRLError

MAX_EPISODES = 4096  # memories kept at once (the oldest are dropped; an eval batch holds far fewer)


def parse_penalty(value: float | str) -> float:
    """A penalty from a flag or a model's recorded settings: a number >= 0 or ``"inf"``."""
    try:
        penalty = float(value)
    except (TypeError, ValueError):
        raise SpatialRLError(f"tried-actions penalty: expected a number >= 0 or 'inf', got {value!r}") from None
    if math.isnan(penalty) or penalty < 0:
        raise SpatialRLError(f"tried-actions penalty: expected a number >= 0 or 'inf', got {value!r}")
    return penalty


def recorded_penalty(settings: dict[str, Any] | None) -> float:
    """The penalty a model records in its evaluation settings (``eval.tried_penalty`` of its
    ``spatialrl_model.json``, as ``model_eval_settings`` returns them); 0 (off) when it records none."""
    return parse_penalty((settings or {}).get("tried_penalty", 0))


def penalty_text(penalty: float) -> str | float:
    """The penalty as a run's config records it (JSON has no infinity)."""
    return "inf" if math.isinf(penalty) else penalty


def view_key(conversation: Conversation) -> str | None:
    """A digest of the last image of the conversation's last user turn, or None when it has none."""
    users = [m for m in conversation if m["role"] == "user"]
    images = images_of(users[-1:]) if users else []
    if not images:
        return None
    array = np.ascontiguousarray(np.asarray(images[-1]))
    digest = hashlib.blake2b(array.tobytes(), digest_size=16)
    digest.update(str(array.shape).encode())
    return digest.hexdigest()


def choose(logprobs: np.ndarray, times: list[int], penalty: float) -> int:
    """The index maximising ``logprobs - penalty * times``; with an infinite penalty, the most likely of the
    least-given answers (ties go to the first)."""
    times_arr = np.asarray(times, dtype=float)
    if math.isinf(penalty):
        least = times_arr == times_arr.min()
        return int(np.argmax(np.where(least, logprobs, -np.inf)))
    return int(np.argmax(logprobs - penalty * times_arr))


class TriedActionsPolicy:
    """Wrap a local model policy (``hf:`` / ``builtin:``, anything with ``model`` and ``processor``) with the
    tried-actions memory (module docstring). ``usage["tried_overrides"]`` counts the answers it changed, and
    each changed step's line in ``steps.jsonl`` keeps the model's own answer as ``greedy_response``."""

    def __init__(self, inner: Any, penalty: float = math.inf):
        if not (hasattr(inner, "model") and hasattr(inner, "processor")):
            raise SpatialRLError(f"the tried-actions memory needs a local model agent (hf:PATH or builtin:NAME), "
                                 f"not {getattr(inner, 'name', type(inner).__name__)}")
        self.inner = inner
        self.penalty = parse_penalty(penalty)
        self.name = inner.name
        self.usage = getattr(inner, "usage", {})
        self.usage.setdefault("tried_overrides", 0)
        self.usage.setdefault("tried_repeats", 0)
        self._memory: OrderedDict[str, Counter[tuple[str, str]]] = OrderedDict()

    def generate(self, conversations: list[Conversation], sampling: SamplingParams,
                 infos: list[dict[str, Any]] | None = None) -> list[Generation]:
        if not sampling.greedy:
            raise SpatialRLError("the tried-actions memory is a rule of greedy decoding: use --temperature 0 "
                                 "or turn it off (--tried-penalty 0)")
        if infos is None or len(infos) != len(conversations):
            raise ValueError("the tried-actions memory needs each conversation's env info (infos=...)")
        tasks = [str(info.get("task_id")) for info in infos]
        if len(set(tasks)) != len(tasks):
            raise SpatialRLError("the tried-actions memory got two conversations of one task in one call; it "
                                 "keeps one memory per episode (evaluation runs each task once)")
        generations = self.inner.generate(conversations, sampling, infos)
        if self.penalty == 0:
            return generations
        memories, views, repeats = [], [], []
        for conv, info, task, gen in zip(conversations, infos, tasks, generations, strict=True):
            if int(info.get("step") or 0) == 0 or task not in self._memory:
                self._memory[task] = Counter()
                while len(self._memory) > MAX_EPISODES:
                    self._memory.popitem(last=False)
            memories.append(self._memory[task])
            views.append(view_key(conv))
            candidates = list(info.get("candidate_responses") or [])
            answer = gen.text.strip()
            if gen.error is None and views[-1] is not None and answer in candidates \
                    and memories[-1][(views[-1], answer)]:
                repeats.append(len(views) - 1)
        self.usage["tried_repeats"] += len(repeats)
        if repeats:
            generations = self._rechoose(conversations, infos, generations, memories, views, repeats)
        for gen, memory, view in zip(generations, memories, views, strict=True):
            if gen.error is None and view is not None:
                memory[(view, gen.text.strip())] += 1
        return generations

    def _rechoose(self, conversations: list[Conversation], infos: list[dict[str, Any]], generations: list[Generation],
                  memories: list[Counter], views: list[str | None], repeats: list[int]) -> list[Generation]:
        """Score the candidates of the conversations whose greedy answer repeats, and answer by the rule."""
        from spatialrl.models.answer_scores import answer_distributions

        out = list(generations)
        by_candidates: dict[tuple[str, ...], list[int]] = {}
        for i in repeats:
            by_candidates.setdefault(tuple(infos[i]["candidate_responses"]), []).append(i)
        for candidates, rows in by_candidates.items():
            probs = answer_distributions(self.inner.model, self.inner.processor,
                                         [conversations[i] for i in rows], candidates)
            with np.errstate(divide="ignore"):
                logprobs = np.log(probs)
            for i, lp in zip(rows, logprobs, strict=True):
                times = [memories[i][(views[i], c)] for c in candidates]
                pick = candidates[choose(lp, times, self.penalty)]
                if pick != generations[i].text.strip():
                    self.usage["tried_overrides"] += 1
                    old = generations[i]
                    out[i] = Generation(text=pick, prompt_tokens=old.prompt_tokens,
                                        completion_tokens=old.completion_tokens,
                                        extra={**old.extra, "step_record": {"greedy_response": old.text}})
        return out
