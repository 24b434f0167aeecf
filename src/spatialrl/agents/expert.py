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
    name = "expert"

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
            out.append(Generation(text=info["expert_response"]))
        return out
