"""The random agent: a uniform choice among the env's well-formed answers (``info["candidate_responses"]``).

It is the chance baseline of every report. Seeded, so two runs with the same seed answer identically.
Inside the runner each conversation is drawn from its own generator, seeded by (seed, the episode's id
and turn: ``SamplingParams.streams``), so an episode's answers are the same at any ``--batch-size`` and
after a resume from any kill point. Called without streams it draws from one generator per policy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spatialrl.agents.base import Conversation, Generation, SamplingParams, env_infos


class RandomPolicy:
    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def generate(
        self,
        conversations: list[Conversation],
        sampling: SamplingParams,
        infos: list[dict[str, Any]] | None = None,
    ) -> list[Generation]:
        infos = env_infos("random", conversations, infos, "candidate_responses",
                          "this env does not support the random agent")
        out = []
        for i, info in enumerate(infos):
            choices = info["candidate_responses"]
            if not choices:
                raise KeyError("env info has an empty 'candidate_responses'; the random agent has nothing to choose")
            material = sampling.stream_seed(i, self.seed)
            rng = np.random.default_rng(material) if material is not None else self.rng
            out.append(Generation(text=str(choices[int(rng.integers(len(choices)))])))
        return out
