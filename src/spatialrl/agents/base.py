"""The Policy contract: a batch of chat conversations in, a batch of generations out.

Conversations use the Hugging Face / OpenAI chat format with image parts::

    [{"role": "system", "content": [{"type": "text", "text": "..."}]},
     {"role": "user", "content": [{"type": "image", "image": <uint8 HxWx3 ndarray>},
                                  {"type": "text", "text": "..."}]},
     {"role": "assistant", "content": [{"type": "text", "text": "Action: MoveAhead"}]}]

Every policy (local transformers model, OpenAI-compatible server, expert, random, human) implements
``generate``. ``infos`` carries each conversation's latest env ``info`` dict; model policies ignore it,
the expert and random policies read ``info["expert_response"]`` / ``info["candidate_responses"]``
from it (the env is the single source of ground truth).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from spatialrl.conversation import (
    Conversation,
    Generation,
    Message,
    SamplingParams,
    images_of,
    text_of,
)

__all__ = ["Conversation", "Generation", "Message", "Policy", "SamplingParams", "env_infos", "images_of", "text_of"]


@runtime_checkable
class Policy(Protocol):
    name: str

    def generate(
        self,
        conversations: list[Conversation],
        sampling: SamplingParams,
        infos: list[dict[str, Any]] | None = None,
    ) -> list[Generation]: ...


def env_infos(who: str, conversations: list[Conversation], infos: list[dict[str, Any]] | None, key: str,
              purpose: str) -> list[dict[str, Any]]:
    """The env infos of a policy that answers from them (expert, random, roll-in), checked: one per
    conversation, each with ``key``; else an error saying which policy needed what (``purpose``)."""
    if infos is None or len(infos) != len(conversations):
        raise ValueError(f"the {who} policy needs the env info of every conversation (infos=...)")
    for info in infos:
        if key not in info:
            raise KeyError(f"env info has no {key!r}; {purpose}")
    return infos
