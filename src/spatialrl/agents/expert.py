"""The expert agent: answers with the env's own ground truth (``info["expert_response"]``).

For TVR that is the BFS oracle's next action from the *current* pose; for V-IRL the JSON answer with the
oracle observation, current instruction and ground-truth action (exactly the SFT target); for
GeneralPoints a correct equation. Keeping the answer in the env makes the expert and the SFT data the
same thing by construction.
"""

from __future__ import annotations

from typing import Any

from spatialrl.agents.base import Conversation, Generation, SamplingParams


class ExpertPolicy:
    """The env's ground truth. ``noise`` > 0 makes it a *noisy* expert for SFT data (DART-style state
    coverage): on that share of turns it answers a random other candidate (``info["candidate_responses"]``,
    never a stop — that would end the episode at once), so the episode wanders off the optimal path,
    while ``Generation.extra["label"]`` keeps the true expert answer for the dataset to supervise. The
    draws come from ``random.Random(f"{sampling.seed}:{episode}:{step}")``: the same for any batch size."""

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
        if infos is None or len(infos) != len(conversations):
            raise ValueError("the expert policy needs the env info of every conversation (infos=...)")
        out = []
        for info in infos:
            if "expert_response" not in info:
                raise KeyError("env info has no 'expert_response'; this env does not support the expert agent")
            out.append(self._answer(info, sampling))
        return out

    def _answer(self, info: dict[str, Any], sampling: SamplingParams) -> Generation:
        label = info["expert_response"]
        if self.noise <= 0.0:
            return Generation(text=label)
        import random

        rng = random.Random(f"{sampling.seed}:{info.get('task_id', info.get('episode_id'))}:{info.get('step')}")
        if rng.random() >= self.noise:
            return Generation(text=label, extra={"label": label})
        others = [c for c in info.get("candidate_responses") or () if c != label and "stop" not in c.lower()]
        if not others:
            return Generation(text=label, extra={"label": label})
        return Generation(text=rng.choice(others), extra={"label": label})
