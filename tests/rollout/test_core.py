"""The one rollout core (``rollout/core.py``) under eval (text act step) and under RL (token act step)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from spatialrl.agents.base import Generation, SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.envs.registry import TaskSuite
from spatialrl.models.tiny import build_tiny
from spatialrl.rollout.agent_loop import EnvPool
from spatialrl.rollout.core import Slot, SlotPool
from spatialrl.rollout.runner import run_episodes
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import sample_segments

from ..rl.letters import LETTER_SUITE, LetterPrompter


@dataclass
class Said:
    text: str
    error: str | None = None


class CountingPrompter(LetterPrompter):
    """The letters prompter, counting its updates (the core updates it only while an episode goes on)."""

    def reset(self, obs, info):
        super().reset(obs, info)
        self.updates = 0

    def update(self, response, obs, info):
        super().update(response, obs, info)
        self.updates += 1


SUITE = TaskSuite(name="letters-core", description="letters", make_env=LETTER_SUITE.make_env,
                  make_prompter=lambda o: CountingPrompter(), episodes=LETTER_SUITE.episodes,
                  summarize=LETTER_SUITE.summarize, default_options={"n": 6, "turns": 3}, thread_safe_envs=True)


@pytest.mark.parametrize("env_threads", [1, 3])
def test_turns_caps_and_errors(env_threads):
    """One lock-step turn: answers step their envs (in threads or not, same outcomes in slot order), an
    errored answer steps nothing, the turn cap ends an episode the env would go on with, and a prompter
    sees the answer only while its episode goes on."""
    options = {"n": 3, "turns": 3}
    specs = SUITE.episodes(options)
    pool: SlotPool[Slot] = SlotPool(SUITE, options, n_slots=3, max_turns=2, env_threads=env_threads)
    try:
        started = pool.start(list(enumerate(specs)))
        assert [s.spec.episode_id for s in started] == ["L0", "L1", "L2"] and pool.idle() == []
        first = pool.turn(lambda slots: [Said(s.spec.category * 4) for s in slots])
        assert [o.index for o in first] == [0, 1, 2]
        assert [(o.step[1], o.ended, o.capped, o.done) for o in first] == [(1.0, False, False, False)] * 3
        assert [s.t for s in pool.slots] == [1, 1, 1] and [s.prompter.updates for s in pool.slots] == [1, 1, 1]
        second = pool.turn(lambda slots: [Said("x", error="server down") if s.spec.episode_id == "L1"
                                          else Said("zz") for s in slots])
        errored = second[1]
        assert not errored.stepped and errored.done and pool.slots[1].t == 1  # the env was not stepped
        for o in (second[0], second[2]):  # the env would go on (3 turns), the cap of 2 ends it
            assert o.stepped and o.capped and not o.ended and o.done and o.step[1] == 0.0
            assert o.slot.t == 2 and o.slot.ret == 1.0 and o.slot.history == ["a" * 4 if o.index == 0 else "o" * 4, "zz"]
            assert o.slot.prompter.updates == 1  # not shown the capping answer
        for i in range(3):
            pool.release(i)
        assert pool.active() == [] and pool.turn(lambda slots: []) == []
    finally:
        pool.close()


def test_replay_restores_an_episode():
    options = {"n": 1, "turns": 4}
    spec = SUITE.episodes(options)[0]
    pool: SlotPool[Slot] = SlotPool(SUITE, options, n_slots=1, max_turns=10)
    try:
        slot = pool.replay(0, spec, ["aa", "ab"])
        assert slot.t == 2 and slot.ret == pytest.approx(1.5) and slot.prompter.updates == 2
        with pytest.raises(RuntimeError, match="replay ended the episode"):
            pool.replay(0, spec, ["a", "a", "a", "a"])
    finally:
        pool.close()


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return build_tiny("qwen2_5_vl", seed=0)


def test_eval_runner_and_rl_loop_play_the_same_episodes(tiny, tmp_path):
    """The same model, greedy, on the same episodes: the eval runner (``HFPolicy.generate`` as the act step)
    and the RL loop (``sample_segments`` as the act step) give the same answers, rewards and step records,
    because both run on the one core (same resets, prompts, steps and caps)."""
    model, proc = tiny
    options = {"n": 4, "turns": 2}
    specs = LETTER_SUITE.episodes(options)
    sampling = SamplingParams(max_new_tokens=6)

    steps: dict[str, list[tuple[str, float, dict]]] = {}

    def keep(spec, conversation, gen, step):
        steps.setdefault(spec.episode_id, []).append((gen.text, step[1], step[4]["record"]))

    policy = HFPolicy(model, proc, device="cpu")
    result = run_episodes(LETTER_SUITE, options, policy, specs, batch_size=3, sampling=sampling, progress=False,
                          on_turn=keep)
    assert len(result.episodes) == 4 and result.env_steps == 8

    turns = TurnTokenizer(proc, model.config.model_type)
    pool = EnvPool(LETTER_SUITE, options, turns, n_slots=4, max_turns=10, max_tokens=4096, sample=sample_segments)
    try:
        pool.start_many([(i, spec, None) for i, spec in enumerate(specs)])
        finished = []
        while pool.active():
            _, done = pool.turn(model, sampling, None)
            finished += done
    finally:
        pool.close()
    rl = {t.episode_id: list(zip(t.responses, t.turn_rewards, t.turn_records, strict=True)) for t in finished}
    assert set(rl) == set(steps)
    for episode_id, eval_steps in steps.items():
        assert [(text, reward) for text, reward, _ in rl[episode_id]] == [(t, r) for t, r, _ in eval_steps]
        assert [rec for _, _, rec in rl[episode_id]] == [rec for _, _, rec in eval_steps]
    assert all(t.done and t.cut is None for t in finished)


def test_an_act_step_must_answer_every_slot():
    pool: SlotPool[Slot] = SlotPool(SUITE, {"n": 2}, n_slots=2, max_turns=5)
    try:
        pool.start(list(enumerate(SUITE.episodes({"n": 2}))))
        with pytest.raises(RuntimeError, match="returned 1 answers for 2 slots"):
            pool.turn(lambda slots: [Generation(text="a")])
    finally:
        pool.close()
