"""Live rollouts for RL: a pool of env slots stepped in lock-step with batched, token-level sampling.

Each turn, every active slot's token segment goes into one ``generate`` call; each env steps on its
own decoded answer; the slot's :class:`~spatialrl.rollout.trajectory.Trajectory` records the sampled
tokens, the env's increment, the reward and ``info["record"]``. It uses the same pieces as the eval
runner (``TaskSuite.make_env`` / ``make_prompter``, ``EpisodeSpec``) so prompts are byte-identical to
eval, but keeps token ids end to end (the runner is text-level) and knows the trainers' two patterns:

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
from dataclasses import dataclass, field
from typing import Any

import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.envs.registry import EpisodeSpec, TaskSuite
from spatialrl.rollout.records import jsonable
from spatialrl.rollout.trajectory import Segment, Trajectory, TurnTokenizer
from spatialrl.train.policy_ops import sample_segments


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


@dataclass
class Slot:
    env: Any
    spec: EpisodeSpec | None = None
    prompter: Any = None
    trajectory: Trajectory | None = None
    segment: Segment | None = None
    history: list[str] = field(default_factory=list)  # responses so far (replayed on resume)


class EnvPool:
    """``n_slots`` envs of one task suite, stepped together.

    ``max_turns`` caps an episode (a safety net; envs end their own episodes) and ``max_tokens`` caps a
    segment (prompt + every turn so far + the next answer's budget): an episode that would exceed either
    is *cut* — recorded with ``trajectory.cut`` set and treated as ended without bootstrapping.

    ``env_threads`` > 1 steps the turn's envs — and tokenises their next prompts (PIL image processing
    releases the GIL too) — in a thread pool when the suite declares ``thread_safe_envs`` (V-IRL: cv2
    projection releases the GIL). Each slot works on its own answer and segment, so threads change no
    result. ``seconds`` adds up where a turn's time goes (``generate``; ``env``:
    env steps; ``tokenize``: prompts, chat template and image processing) until :meth:`take_seconds`.
    """

    def __init__(self, suite: TaskSuite, options: dict[str, Any], turns: TurnTokenizer, n_slots: int,
                 max_turns: int, max_tokens: int, env_threads: int = 1):
        self.suite, self.options, self.turns = suite, options, turns
        self.max_turns, self.max_tokens = max_turns, max_tokens
        self.slots = [Slot(env=suite.make_env(options)) for _ in range(n_slots)]
        self.seconds = {"generate": 0.0, "env": 0.0, "tokenize": 0.0}
        self._executor, self._local = None, threading.local()
        if env_threads > 1 and suite.thread_safe_envs and n_slots > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(min(env_threads, n_slots), thread_name_prefix="env")

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown()
        for slot in self.slots:
            slot.env.close()

    def take_seconds(self) -> dict[str, float]:
        """The time split since the last call (then zeroed)."""
        out, self.seconds = self.seconds, dict.fromkeys(self.seconds, 0.0)
        return out

    def _map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, in the env threads when there are any (order kept)."""
        if self._executor is not None and len(items) > 1:
            return list(self._executor.map(fn, items))
        return [fn(x) for x in items]

    def _thread_turns(self) -> TurnTokenizer:
        """The pool's ``TurnTokenizer`` on the calling thread: the original on the caller's thread, a deep
        copy (same processor and tokenizer state) on each env thread."""
        if self._executor is None:
            return self.turns
        turns = getattr(self._local, "turns", None)
        if turns is None:
            turns = self._local.turns = copy.deepcopy(self.turns)
        return turns

    def _step_envs(self, slots: list[Slot], texts: list[str]) -> list[tuple]:
        t0 = time.perf_counter()
        results = self._map(lambda st: st[0].env.step(st[1]), list(zip(slots, texts, strict=True)))
        self.seconds["env"] += time.perf_counter() - t0
        return results

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
        slot = self.slots[index]
        obs, info = slot.env.reset(seed=spec.seed, options=dict(spec.reset_options))
        slot.spec, slot.prompter = spec, self.suite.make_prompter(self.options)
        slot.prompter.reset(obs, info)
        slot.history = []
        answers, trajectory = resume
        for text in answers:
            obs, _, terminated, truncated, info = slot.env.step(text)
            if terminated or truncated:
                raise RuntimeError(f"episode {spec.episode_id}: replay ended the episode; the env is not "
                                   "deterministic given its seed, options and answers")
            slot.prompter.update(text, obs, info)
            slot.history.append(text)
        slot.trajectory, slot.segment = trajectory, trajectory.segments[-1]

    def start_many(self, jobs: list[tuple[int, EpisodeSpec, str | None]]) -> None:
        """Begin each ``(slot index, spec, group)``. The resets (rendering the first observation) and the
        first prompts' tokenisation run in the env threads: PPO refills a slot per finished episode and
        GRPO starts every slot at once, so done one by one they would leave the GPU idle."""
        slots = [self.slots[i] for i, _, _ in jobs]
        t0 = time.perf_counter()
        resets = self._map(lambda job: self.slots[job[0]].env.reset(seed=job[1].seed,
                                                                    options=dict(job[1].reset_options)), jobs)
        self.seconds["env"] += time.perf_counter() - t0
        for slot, (_, spec, group), (obs, info) in zip(slots, jobs, resets, strict=True):
            slot.spec, slot.prompter = spec, self.suite.make_prompter(self.options)
            slot.prompter.reset(obs, info)
            slot.history = []
            slot.trajectory = Trajectory(episode_id=spec.episode_id, group=group or spec.episode_id,
                                         category=spec.category)
        t0 = time.perf_counter()
        segments = self._map(lambda slot: self._thread_turns().start(slot.prompter.messages()), slots)
        self.seconds["tokenize"] += time.perf_counter() - t0
        for slot, seg in zip(slots, segments, strict=True):
            slot.segment = seg
            slot.trajectory.segments.append(seg)

    def snapshot(self) -> list[tuple[EpisodeSpec, list[str], Trajectory] | None]:
        """What :meth:`start` needs to restore every slot (``None`` for an idle slot)."""
        return [(s.spec, list(s.history), s.trajectory) if s.spec is not None and s.trajectory is not None
                else None for s in self.slots]

    def active(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s.spec is not None]

    def _finish(self, slot: Slot) -> None:
        slot.spec = slot.prompter = slot.segment = None
        slot.history = []

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
                self._finish(slot)
                continue
            chosen.append(i)
        t0 = time.perf_counter()
        samples = sample_segments(model, self.turns, [self.slots[i].segment for i in chosen], sampling, generator,
                                  max_batch_size=max_batch_size, vision_cache=vision_cache, kv_cache=kv_cache)
        self.seconds["generate"] += time.perf_counter() - t0
        tokenizer = self.turns.tokenizer
        texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids, _ in samples]
        results = self._step_envs([self.slots[i] for i in chosen], texts)
        steps: list[Step] = []
        pending: list[tuple[Slot, list[int], Any]] = []  # slots whose next prompt is to be tokenised
        for i, (ids, logprobs), text, result in zip(chosen, samples, texts, results, strict=True):
            slot = self.slots[i]
            traj, seg = slot.trajectory, slot.segment
            assert traj is not None and seg is not None and slot.spec is not None
            turn = traj.num_turns
            self.turns.add_policy(seg, ids, logprobs, turn)
            traj.turn_segment.append(len(traj.segments) - 1)
            obs, reward, terminated, truncated, info = result
            traj.turn_rewards.append(float(reward))
            traj.turn_records.append(jsonable(info.get("record", {})))
            traj.responses.append(text)
            slot.history.append(text)
            ended = bool(terminated or truncated)
            if not ended and traj.num_turns >= self.max_turns:
                traj.cut = f"turn cap {self.max_turns}"
                ended = True
            step = Step(slot=i, trajectory=traj, turn=turn, reward=float(reward), terminated=bool(terminated),
                        truncated=bool(truncated), ended=ended)
            steps.append(step)
            if ended:
                traj.done = bool(terminated or truncated)
                traj.episode = jsonable(info.get("episode")) if info.get("episode") is not None else None
                finished.append(traj)
                self._finish(slot)
                continue
            slot.prompter.update(text, obs, info)
            pending.append((slot, ids, slot.prompter.messages()))
        t0 = time.perf_counter()
        self._map(lambda job: self._continue(*job), pending)
        self.seconds["tokenize"] += time.perf_counter() - t0
        return steps, finished

    def _continue(self, slot: Slot, ids: list[int], conversation: Any) -> None:
        """Append the env's answer to the slot's segment, or start a new segment (a fresh conversation).
        Runs in the env threads with a per-thread copy of the tokenizer (its Rust core is not safe to
        share across threads)."""
        turns = self._thread_turns()
        assert slot.segment is not None and slot.trajectory is not None
        if not turns.extend(slot.segment, ids, conversation):
            slot.segment = turns.start(conversation)
            slot.trajectory.segments.append(slot.segment)
