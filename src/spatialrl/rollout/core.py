"""The one rollout core: B env slots of one task suite, stepped in lock-step with a pluggable act step.

Both loops run on it:

* the eval runner (:mod:`spatialrl.rollout.runner`): the act step is a text policy's ``generate``
  (local model, API, expert, random, human) on every active slot's conversation;
* the RL loop (:mod:`spatialrl.rollout.agent_loop`): the act step samples tokens from each slot's token
  segment and decodes them.

What the core owns, once: making the envs, starting an episode in a slot (``env.reset(seed, options)``, a
fresh prompter from ``TaskSuite.make_prompter``, ``prompter.reset``), one lock-step turn (the act step for
the chosen slots, the env steps, the slot's turn count and return, the prompter's update when the episode
goes on), the turn cap, the thread pool for suites with ``thread_safe_envs`` and the time spent in envs.

Batched envs: when the suite offers ``make_vector_env`` and it gives a vector env for these options, the
pool holds that one env (through :class:`spatialrl.envs.vector.VectorSlots`) instead of one env per slot:
the resets of a ``start`` and the steps of a ``turn`` go to it in one call each (one batched render), and
each slot gets back exactly what its own single env would have returned, so everything above — seeds and
reset options per episode, turn caps, which slots act, records — is unchanged. Each slot's ``env`` is then
a :class:`~spatialrl.envs.vector.SlotEnv` view (single-env calls, one env of the batch at a time).
What each loop keeps: what it records (step lines and episode records, or token trajectories), which
slots act (PPO picks slots, the runner takes all), and what to do with a finished slot.

An act step gets the slots and returns one :class:`Answer`-like object per slot (``.text``, ``.error``):
a ``Generation`` from a policy, or the RL loop's sampled tokens. A slot whose answer carries an
``error`` does not step its env; the caller decides (the runner ends the episode as failed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from spatialrl.envs.registry import EpisodeSpec, Prompter, TaskSuite
from spatialrl.envs.vector import SlotEnv, VectorSlots


class Answer(Protocol):
    """What an act step returns per slot: the text the env gets, or an error (the env is not stepped)."""

    text: str
    error: str | None


@dataclass(eq=False)
class Slot:
    """One env and the episode it is running (``spec`` is None while the slot is idle); compared by identity."""

    env: Any
    spec: EpisodeSpec | None = None
    prompter: Prompter | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the env's latest info
    t: int = 0  # env steps taken in this episode (the turn count)
    ret: float = 0.0  # sum of rewards so far (the return)
    history: list[str] = field(default_factory=list)  # the answers the env got, in order

    @property
    def active(self) -> bool:
        return self.spec is not None


S = TypeVar("S", bound=Slot)
A = TypeVar("A", bound=Answer)
T = TypeVar("T")
U = TypeVar("U")


@dataclass
class Outcome(Generic[S, A]):
    """One slot's turn: its answer and, unless the answer was an error, the env's step 5-tuple.

    ``ended``: the env terminated or truncated the episode; ``capped``: it went on but reached the turn
    cap. The prompter was updated with the answer only when neither holds (the episode goes on)."""

    index: int
    slot: S
    answer: A
    step: tuple[Any, float, bool, bool, dict[str, Any]] | None = None
    ended: bool = False
    capped: bool = False

    @property
    def stepped(self) -> bool:
        return self.step is not None

    @property
    def done(self) -> bool:
        """The slot's episode is over (ended by the env, capped, or its answer was an error)."""
        return self.step is None or self.ended or self.capped


class SlotPool(Generic[S]):
    """``n_slots`` envs of ``suite``; ``make_slot(env)`` builds a slot (a :class:`Slot` subclass carries a
    loop's own fields). ``max_turns`` caps an episode (a safety net; envs end their own episodes).

    ``env_threads`` > 1 runs resets and steps in a thread pool when the suite declares ``thread_safe_envs``
    (V-IRL: cv2 projection releases the GIL); every slot works on its own env, so threads change no
    result and outcomes keep slot order. ``seconds["env"]`` adds up the time spent in resets and steps.

    ``vector`` is the suite's vector env when it offers one for these options (``suite.make_vector_env``;
    the suite's own option turns it off, e.g. TVR's ``vector_env=false``): then all slots' resets and steps
    of a call run as one batched call; results are the same as with one env per slot.
    """

    def __init__(self, suite: TaskSuite, options: dict[str, Any], n_slots: int, max_turns: int,
                 env_threads: int = 1, make_slot: Callable[[Any], S] = Slot):  # type: ignore[assignment]
        self.suite, self.options, self.max_turns = suite, options, max_turns
        self.vector: VectorSlots | None = None
        venv = suite.make_vector_env(options, n_slots) if suite.make_vector_env is not None and n_slots > 0 else None
        if venv is not None:
            self.vector = VectorSlots(venv)
            if self.vector.num_envs != n_slots:
                raise RuntimeError(f"{suite.name}: make_vector_env(options, {n_slots}) made {self.vector.num_envs} envs")
        self.slots: list[S] = [make_slot(SlotEnv(self.vector, i) if self.vector is not None else suite.make_env(options))
                               for i in range(n_slots)]
        self.seconds: dict[str, float] = {"env": 0.0}
        self.executor: ThreadPoolExecutor | None = None
        if env_threads > 1 and suite.thread_safe_envs and n_slots > 1:
            self.executor = ThreadPoolExecutor(min(env_threads, n_slots), thread_name_prefix="env")

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()
        for slot in self.slots:
            slot.env.close()
        if self.vector is not None:
            self.vector.close()

    def map(self, fn: Callable[[T], U], items: Sequence[T]) -> list[U]:
        """``[fn(x) for x in items]``, in the env threads when there are any (order kept)."""
        if self.executor is not None and len(items) > 1:
            return list(self.executor.map(fn, items))
        return [fn(x) for x in items]

    def active(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s.spec is not None]

    def idle(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s.spec is None]

    # -- episodes
    def start(self, jobs: Sequence[tuple[int, EpisodeSpec]]) -> list[S]:
        """Begin each ``(slot index, spec)``: reset the env (in the env threads), make the suite's prompter
        and show it the first observation. Returns the started slots."""
        slots = [self.slots[i] for i, _ in jobs]
        t0 = time.perf_counter()
        if self.vector is not None:
            resets = self.vector.reset([(i, spec.seed, dict(spec.reset_options)) for i, spec in jobs])
        else:
            resets = self.map(lambda job: self.slots[job[0]].env.reset(seed=job[1].seed,
                                                                       options=dict(job[1].reset_options)), jobs)
        self.seconds["env"] += time.perf_counter() - t0
        for slot, (_, spec), (obs, info) in zip(slots, jobs, resets, strict=True):
            self._begin(slot, spec, obs, info)
        return slots

    def replay(self, index: int, spec: EpisodeSpec, answers: Sequence[str]) -> S:
        """Begin ``spec`` in slot ``index`` and re-apply ``answers`` without a model (envs are deterministic
        given seed, options and answers): how an episode in flight at a checkpoint is restored."""
        slot = self.slots[index]
        obs, info = slot.env.reset(seed=spec.seed, options=dict(spec.reset_options))
        self._begin(slot, spec, obs, info)
        for text in answers:
            obs, reward, terminated, truncated, info = slot.env.step(text)
            if terminated or truncated:
                raise RuntimeError(f"episode {spec.episode_id}: replay ended the episode; the env is not "
                                   "deterministic given its seed, options and answers")
            self._advance(slot, text, reward, info)
            slot.prompter.update(text, obs, info)
        return slot

    def _begin(self, slot: S, spec: EpisodeSpec, obs: Any, info: dict[str, Any]) -> None:
        slot.spec, slot.prompter = spec, self.suite.make_prompter(self.options)
        slot.prompter.reset(obs, info)
        slot.info, slot.t, slot.ret, slot.history = info, 0, 0.0, []

    @staticmethod
    def _advance(slot: Slot, text: str, reward: float, info: dict[str, Any]) -> None:
        slot.t += 1
        slot.ret += float(reward)
        slot.history.append(text)
        slot.info = info

    def release(self, index: int) -> None:
        """Mark slot ``index`` idle (its env is kept for the next episode)."""
        slot = self.slots[index]
        slot.spec = slot.prompter = None
        slot.history = []

    # -- one lock-step turn
    def turn(self, act: Callable[[list[S]], Sequence[A]], indices: Sequence[int] | None = None) -> list[Outcome[S, A]]:
        """One turn of the given active slots (default: all): ``act`` answers them in one batch, every slot
        without an error steps its env on its answer, and a slot whose episode goes on shows its prompter
        the answer and the new observation. Slots are not released: the caller records and releases."""
        indices = [i for i in (self.active() if indices is None else indices) if self.slots[i].spec is not None]
        if not indices:
            return []
        slots = [self.slots[i] for i in indices]
        answers = list(act(slots))
        if len(answers) != len(slots):
            raise RuntimeError(f"act step returned {len(answers)} answers for {len(slots)} slots")
        outcomes = [Outcome(index=i, slot=s, answer=a) for i, s, a in zip(indices, slots, answers, strict=True)]
        stepping = [o for o in outcomes if o.answer.error is None]
        t0 = time.perf_counter()
        if self.vector is not None:
            results = self.vector.step([(o.index, o.answer.text) for o in stepping])
        else:
            results = self.map(lambda o: o.slot.env.step(o.answer.text), stepping)
        self.seconds["env"] += time.perf_counter() - t0
        for o, (obs, reward, terminated, truncated, info) in zip(stepping, results, strict=True):
            o.step = (obs, float(reward), bool(terminated), bool(truncated), info)
            self._advance(o.slot, o.answer.text, reward, info)
            o.ended = bool(terminated or truncated)
            o.capped = not o.ended and o.slot.t >= self.max_turns
            if not o.done:
                o.slot.prompter.update(o.answer.text, obs, info)
        return outcomes
