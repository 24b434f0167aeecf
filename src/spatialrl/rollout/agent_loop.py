"""Live rollouts for RL: the rollout core (:mod:`spatialrl.rollout.core`) with a token-level act step.

Each turn, every acting slot's token segment goes into one sampling call (the act step, ``sample``: the
trainers' token sampler, passed in so this layer does not depend on ``train``); each env steps on its
own decoded answer; the slot's :class:`~spatialrl.rollout.trajectory.Trajectory` records the sampled
tokens, the env's increment, the reward and ``info["record"]``. The core is the eval runner's, so envs,
prompts, resets, turn caps and env threads are the same code as eval; this loop keeps token ids end to
end (the runner is text-level) and knows the trainers' two patterns:

* GRPO: start a batch of episodes (G copies of each task, same seed and options), run until all end;
* PPO: keep ``N`` slots busy for exactly ``num_steps`` turns per update, refilling a slot with the
  next episode when one ends, and carrying unfinished episodes over to the next update (as the
  SFTvsRL reference does).

The decoded text an env sees is ``tokenizer.decode(ids, skip_special_tokens=True)``, as ``HFPolicy``.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from spatialrl.conversation import SamplingParams
from spatialrl.envs.registry import EpisodeSpec, TaskSuite
from spatialrl.models.sampling import PrefixKV
from spatialrl.rollout.core import Slot as CoreSlot
from spatialrl.rollout.core import SlotPool
from spatialrl.rollout.records import jsonable
from spatialrl.rollout.trajectory import Segment, Trajectory, TurnTokenizer

# The token sampler: (model, turns, segments, sampling, generator, *, max_batch_size, vision_cache,
# kv_cache) -> [(token_ids, logprobs)] per segment (``spatialrl.train.policy_ops.sample_segments``).
SampleFn = Callable[..., list[tuple[list[int], list[float]]]]


@dataclass
class Step:
    """One env step of one slot: PPO's storage row (``ended`` may be set later by a token-budget cut)."""

    slot: int
    trajectory: Trajectory
    turn: int
    reward: float
    terminated: bool
    truncated: bool
    ended: bool


@dataclass(eq=False)
class Slot(CoreSlot):
    """A core slot plus the episode's token trajectory and its current segment (``history``: the answers
    so far, replayed on resume)."""

    trajectory: Trajectory | None = None
    segment: Segment | None = None


@dataclass
class Sampled:
    """The token act step's answer for one slot: the sampled ids, their log-probs and the decoded text."""

    ids: list[int]
    logprobs: list[float]
    text: str
    error: str | None = None


class EnvPool:
    """``n_slots`` envs of one task suite on the rollout core, acting through token sampling.

    ``max_turns`` caps an episode (a safety net; envs end their own episodes) and ``max_tokens`` caps a
    segment (prompt + every turn so far + the next answer's budget): an episode that would exceed either
    is *cut* — recorded with ``trajectory.cut`` set and treated as ended without bootstrapping.
    ``sample`` is the token sampler (the act step; trainers pass ``train.policy_ops.sample_segments``).

    ``env_threads`` > 1 steps the turn's envs — and tokenises their next prompts (PIL image processing
    releases the GIL too) — in the core's thread pool when the suite declares ``thread_safe_envs`` (V-IRL:
    cv2 projection releases the GIL). Each slot works on its own answer and segment, so threads change no
    result. ``seconds`` adds up where a turn's time goes (``generate``; ``env``: env resets and steps;
    ``tokenize``: prompts, chat template and image processing) until :meth:`take_seconds`.

    ``prefix_cache`` keeps each slot's KV cache across its turns (passed to ``sample`` as
    ``prefix_cache=``), so a turn prefills only the tokens its answer and the env added, not the whole
    conversation again; answers and log-probs are unchanged (``tests/models/test_prefix_cache.py``).
    """

    def __init__(self, suite: TaskSuite, options: dict[str, Any], turns: TurnTokenizer, n_slots: int,
                 max_turns: int, max_tokens: int, env_threads: int = 1, *, sample: SampleFn,
                 prefix_cache: bool = False):
        self.suite, self.options, self.turns, self.sample = suite, options, turns, sample
        self.max_turns, self.max_tokens = max_turns, max_tokens
        self.core: SlotPool[Slot] = SlotPool(suite, options, n_slots, max_turns, env_threads=env_threads,
                                             make_slot=lambda env: Slot(env=env))
        self.slots = self.core.slots
        self.seconds = {"generate": 0.0, "env": 0.0, "tokenize": 0.0}
        self._local = threading.local()
        # Each live segment's KV cache between turns (``models/sampling.py`` ``PrefixKV``): the next turn
        # prefills only its new tokens. Cleared by the store itself when the weights change.
        self.prefix = PrefixKV() if prefix_cache else None

    def close(self) -> None:
        self.core.close()

    def take_seconds(self) -> dict[str, float]:
        """The time split since the last call (then zeroed)."""
        self.seconds["env"] += self.core.seconds["env"]
        self.core.seconds["env"] = 0.0
        out, self.seconds = self.seconds, dict.fromkeys(self.seconds, 0.0)
        return out

    def _thread_turns(self) -> TurnTokenizer:
        """The pool's ``TurnTokenizer`` on the calling thread: the original on the caller's thread, a deep
        copy (same processor and tokenizer state) on each env thread."""
        if self.core.executor is None:
            return self.turns
        turns = getattr(self._local, "turns", None)
        if turns is None:
            turns = self._local.turns = copy.deepcopy(self.turns)
        return turns

    # -- episodes
    def start(self, index: int, spec: EpisodeSpec, group: str | None = None,
              resume: tuple[list[str], Trajectory] | None = None) -> None:
        """Begin ``spec`` in slot ``index``.

        ``resume = (answers, trajectory)`` restores an episode that was in flight at a checkpoint: the
        env and prompter are rebuilt by re-applying the earlier answers without a model (envs are
        deterministic given seed, options and answers) and the saved trajectory — token segments
        included — continues, so a resumed run sees exactly the token stream an uninterrupted one would.
        """
        if resume is None:
            self.start_many([(index, spec, group)])
            return
        answers, trajectory = resume
        slot = self.core.replay(index, spec, answers)
        slot.trajectory, slot.segment = trajectory, trajectory.segments[-1]

    def start_many(self, jobs: list[tuple[int, EpisodeSpec, str | None]]) -> None:
        """Begin each ``(slot index, spec, group)``. The resets (rendering the first observation) and the
        first prompts' tokenisation run in the env threads: PPO refills a slot per finished episode and
        GRPO starts every slot at once, so done one by one they would leave the GPU idle."""
        slots = self.core.start([(i, spec) for i, spec, _ in jobs])
        for slot, (_, spec, group) in zip(slots, jobs, strict=True):
            slot.trajectory = Trajectory(episode_id=spec.episode_id, group=group or spec.episode_id,
                                         category=spec.category)
        t0 = time.perf_counter()
        segments = self.core.map(lambda slot: self._thread_turns().start(slot.prompter.messages()), slots)
        self.seconds["tokenize"] += time.perf_counter() - t0
        for slot, seg in zip(slots, segments, strict=True):
            slot.segment = seg
            slot.trajectory.segments.append(seg)

    def snapshot(self) -> list[tuple[EpisodeSpec, list[str], Trajectory] | None]:
        """What :meth:`start` needs to restore every slot (``None`` for an idle slot)."""
        return [(s.spec, list(s.history), s.trajectory) if s.spec is not None and s.trajectory is not None
                else None for s in self.slots]

    def active(self) -> list[int]:
        return self.core.active()

    def _finish(self, index: int) -> None:
        if self.prefix is not None and self.slots[index].segment is not None:
            self.prefix.drop(self.slots[index].segment)
        self.core.release(index)
        self.slots[index].segment = None

    # -- one lock-step turn
    def turn(
        self,
        model: Any,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        slots: list[int] | None = None,
        on_cut: Callable[[Trajectory], None] | None = None,
        max_batch_size: int | None = None,
        vision_cache: Any = None,
        kv_cache: str = "dynamic",
    ) -> tuple[list[Step], list[Trajectory]]:
        """Sample one answer for each given active slot and step its env.

        Returns the steps taken and the trajectories that finished this turn (ended by the env or cut).
        A slot whose next answer would not fit ``max_tokens`` is cut *before* sampling (``on_cut`` lets
        PPO mark its last stored step as an episode end).
        """
        finished: list[Trajectory] = []
        chosen = []
        for i in slots if slots is not None else self.active():
            slot = self.slots[i]
            if slot.spec is None:
                continue
            assert slot.segment is not None and slot.trajectory is not None
            if len(slot.segment) + sampling.max_new_tokens > self.max_tokens:
                slot.trajectory.cut = f"token budget: {len(slot.segment)} + {sampling.max_new_tokens} > {self.max_tokens}"
                finished.append(slot.trajectory)
                if on_cut is not None:
                    on_cut(slot.trajectory)
                self._finish(i)
                continue
            chosen.append(i)

        def act(acting: list[Slot]) -> list[Sampled]:
            """The token act step: one sampling call for every acting slot's segment, then decode."""
            t0 = time.perf_counter()
            extra = {"prefix_cache": self.prefix} if self.prefix is not None else {}
            samples = self.sample(model, self.turns, [s.segment for s in acting], sampling, generator,
                                  max_batch_size=max_batch_size, vision_cache=vision_cache, kv_cache=kv_cache,
                                  **extra)
            self.seconds["generate"] += time.perf_counter() - t0
            tokenizer = self.turns.tokenizer
            return [Sampled(ids, logprobs, tokenizer.decode(ids, skip_special_tokens=True))
                    for ids, logprobs in samples]

        outcomes = self.core.turn(act, chosen) if chosen else []
        steps: list[Step] = []
        pending: list[tuple[Slot, list[int], Any]] = []  # slots whose next prompt is to be tokenised
        for o in outcomes:
            slot, answer = o.slot, o.answer
            traj, seg = slot.trajectory, slot.segment
            assert traj is not None and seg is not None and o.step is not None
            turn = traj.num_turns
            self.turns.add_policy(seg, answer.ids, answer.logprobs, turn)
            traj.turn_segment.append(len(traj.segments) - 1)
            _, reward, terminated, truncated, info = o.step
            traj.turn_rewards.append(reward)
            traj.turn_records.append(jsonable(info.get("record", {})))
            traj.responses.append(answer.text)
            if o.capped:
                traj.cut = f"turn cap {self.max_turns}"
            steps.append(Step(slot=o.index, trajectory=traj, turn=turn, reward=reward, terminated=terminated,
                              truncated=truncated, ended=o.done))
            if o.done:
                traj.done = o.ended
                traj.episode = jsonable(info.get("episode")) if info.get("episode") is not None else None
                finished.append(traj)
                self._finish(o.index)
                continue
            pending.append((slot, answer.ids, slot.prompter.messages()))
        t0 = time.perf_counter()
        self.core.map(lambda job: self._continue(*job), pending)
        self.seconds["tokenize"] += time.perf_counter() - t0
        return steps, finished

    def _continue(self, slot: Slot, ids: list[int], conversation: Any) -> None:
        """Append the env's answer to the slot's segment, or start a new segment (a fresh conversation).
        Runs in the env threads with a per-thread copy of the tokenizer (its Rust core is not safe to
        share across threads)."""
        turns = self._thread_turns()
        assert slot.segment is not None and slot.trajectory is not None
        if not turns.extend(slot.segment, ids, conversation):
            if self.prefix is not None:
                self.prefix.drop(slot.segment)
            slot.segment = turns.start(conversation)
            slot.trajectory.segments.append(slot.segment)
