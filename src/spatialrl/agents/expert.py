"""The expert agent: answers with the env's own ground truth (``info["expert_response"]``).

For TVR that is the BFS oracle's next action from the *current* pose; for V-IRL the JSON answer with the
oracle observation, current instruction and ground-truth action (exactly the SFT target); for
GeneralPoints a correct equation. Keeping the answer in the env makes the expert and the SFT data the
same thing by construction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from spatialrl.agents.base import Conversation, Generation, SamplingParams, env_infos


class ExpertPolicy:
    """The env's ground truth. ``noise`` > 0 makes it a *noisy* expert for SFT data (DART-style state
    coverage): on that share of turns it answers a random other candidate (``info["candidate_responses"]``,
    never a stop — that would end the episode at once), so the episode wanders off the optimal path,
    while ``Generation.extra["label"]`` keeps the true expert answer for the dataset to supervise. The
    draws come from ``random.Random(f"{sampling.seed}:{episode}:{step}")`` where the env info names the
    episode (``task_id``) and step (TVR), else from the runner's per-(episode, turn) stream id (V-IRL's
    info has neither): the same for any batch size."""

    name = "expert"
    noise = 0.0  # the plain expert (also for subclasses that do not call __init__)

    def __init__(self, noise: float = 0.0):
        if not 0.0 <= noise < 1.0:
            raise ValueError(f"expert noise must be in [0, 1), got {noise!r}")
        self.noise = noise

    def generate(
        self,
        conversations: list[Conversation],
        sampling: SamplingParams,
        infos: list[dict[str, Any]] | None = None,
    ) -> list[Generation]:
        infos = env_infos("expert", conversations, infos, "expert_response", "this env does not support the expert agent")
        return [self._answer(info, sampling, i) for i, info in enumerate(infos)]

    def _answer(self, info: dict[str, Any], sampling: SamplingParams, i: int = 0) -> Generation:
        label = info["expert_response"]
        if self.noise <= 0.0:
            return Generation(text=label)
        import random

        episode, step = info.get("task_id", info.get("episode_id")), info.get("step")
        if episode is not None and step is not None:
            key = f"{episode}:{step}"
        elif sampling.streams is not None:
            key = f"stream:{sampling.streams[i]}"
        else:  # one fixed draw for every turn would make the noise all or nothing
            raise ValueError("expert noise needs the env info's task_id and step or the runner's stream ids "
                             "(SamplingParams.streams) to draw each turn's noise")
        rng = random.Random(f"{sampling.seed}:{key}")
        if rng.random() >= self.noise:
            return Generation(text=label, extra={"label": label})
        others = [c for c in info.get("candidate_responses") or () if c != label and "stop" not in c.lower()]
        if not others:
            return Generation(text=label, extra={"label": label})
        return Generation(text=rng.choice(others), extra={"label": label})


class RollInPolicy:
    """DAgger roll-in for SFT data: ``agent`` drives the episode, the env's expert labels every state.

    Per turn, with probability ``beta`` the expert's answer is stepped instead of the agent's (beta = 1 is
    the plain expert, beta = 0 pure on-policy states). The draw comes from
    ``random.Random(f"{sampling.seed}:roll-in:{stream}")`` with the runner's per-(episode, turn) stream id,
    so which turns the expert takes does not depend on the batch size or on the other episodes; the agent
    is asked only for the other conversations (with their own stream ids, so a seeded agent answers the
    same whatever the batch). Every generation carries ``extra["label"]`` = ``info["expert_response"]``,
    the oracle's answer at the state the agent reached, and ``extra["by"]`` (``agent``/``expert``). The
    agent's answer is stepped as it is: an unparsable one is the env's to handle (TVR spends the turn and
    keeps the pose), and its state is still labelled. An agent error is passed on (the runner ends that
    episode); its label stays on the generation.
    """

    def __init__(self, agent: Any, beta: float = 0.0):
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0.0 <= beta <= 1.0:
            raise ValueError(f"roll-in beta must be a number in [0, 1], got {beta!r}")
        self.agent = agent
        self.beta = float(beta)
        self.name = f"roll-in:{getattr(agent, 'name', type(agent).__name__)}"
        self.device = getattr(agent, "device", None)  # the runner warns when a model on the CPU will be slow
        self.turns = {"agent": 0, "expert": 0}

    def _expert_turn(self, i: int, info: dict[str, Any], sampling: SamplingParams) -> bool:
        if self.beta >= 1.0:
            return True
        if self.beta <= 0.0:
            return False
        import random

        key = (sampling.streams[i] if sampling.streams is not None
               else f"{info.get('task_id', info.get('episode_id'))}:{info.get('step')}")
        return random.Random(f"{sampling.seed}:roll-in:{key}").random() < self.beta

    def generate(
        self,
        conversations: list[Conversation],
        sampling: SamplingParams,
        infos: list[dict[str, Any]] | None = None,
    ) -> list[Generation]:
        infos = env_infos("roll-in", conversations, infos, "expert_response", "this env cannot label the agent's states")
        by_expert = [self._expert_turn(i, info, sampling) for i, info in enumerate(infos)]
        asked = [i for i, e in enumerate(by_expert) if not e]
        answers: dict[int, Generation] = {}
        if asked:
            streams = None if sampling.streams is None else tuple(sampling.streams[i] for i in asked)
            sub = replace(sampling, streams=streams)
            got = self.agent.generate([conversations[i] for i in asked], sub, [infos[i] for i in asked])
            if len(got) != len(asked):
                raise RuntimeError(f"roll-in agent {self.name}: {len(got)} generations for {len(asked)} prompts")
            answers = dict(zip(asked, got, strict=True))
        out = []
        for i, info in enumerate(infos):
            label = info["expert_response"]
            if by_expert[i]:
                gen = Generation(text=label, extra={"label": label, "by": "expert"})
                self.turns["expert"] += 1
            else:
                gen = answers[i]
                gen = replace(gen, extra={**gen.extra, "label": label, "by": "agent"})
                self.turns["agent"] += 1
            out.append(gen)
        return out
