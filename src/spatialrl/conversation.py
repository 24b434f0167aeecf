"""The conversation types every layer shares: chat messages, decoding settings, one model answer.

They sit below ``envs`` (prompters build conversations) and ``agents`` (policies answer them), so an env
needs nothing from the agent layer. ``spatialrl.agents.base`` re-exports them with the ``Policy``
protocol.

Conversations use the Hugging Face / OpenAI chat format with image parts::

    [{"role": "system", "content": [{"type": "text", "text": "..."}]},
     {"role": "user", "content": [{"type": "image", "image": <uint8 HxWx3 ndarray>},
                                  {"type": "text", "text": "..."}]},
     {"role": "assistant", "content": [{"type": "text", "text": "Action: MoveAhead"}]}]

An assistant message may carry ``"train": false`` (SFT data: context the loss skips, e.g. an earlier
wrong answer a retry prompt repeats; ``models/encode.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

Message = dict[str, Any]
Conversation = list[Message]


def message_header(message: Message) -> Message:
    """A message's fields besides its content (``role``, and ``train`` when given): what every copy of a
    conversation (stored datasets, loaders) keeps."""
    return {"role": message["role"], **({"train": message["train"]} if "train" in message else {})}


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. Evaluation decodes greedily by default (temperature 0), as both papers do."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int | None = None
    # Per-conversation stream ids of one generate call, set by the runner from each episode's id and turn.
    # Seeded policies draw conversation i from a generator seeded by (seed, streams[i]), so an episode's
    # answers do not depend on the batch it is in or on where a resumed run was killed.
    streams: tuple[int, ...] | None = None

    def stream_seed(self, i: int, seed: int | None = None) -> list[int] | None:
        """Seed material (for ``np.random.default_rng`` / hashing) of conversation ``i``: ``[seed, stream]``.
        ``seed`` defaults to ``self.seed``; None when unseeded or when no streams were given."""
        seed = self.seed if seed is None else seed
        if seed is None or self.streams is None:
            return None
        return [int(seed) & (2**63 - 1), int(self.streams[i])]

    def for_conversation(self, i: int) -> SamplingParams:
        """The settings of conversation ``i`` alone: its own ``seed`` (a 31-bit mix of the seed and its
        stream, for policies that take one seed per request, e.g. an API's ``seed`` field), no streams."""
        material = self.stream_seed(i)
        if material is None:
            return replace(self, streams=None)
        import hashlib

        digest = hashlib.sha256(f"{material[0]}:{material[1]}".encode()).digest()
        return replace(self, seed=int.from_bytes(digest[:4], "little") >> 1, streams=None)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Generation:
    """One model answer. ``token_ids``/``logprobs`` are filled by policies that have them (local models)."""

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None  # set when the policy could not answer (e.g. server error after retries)
    extra: dict[str, Any] = field(default_factory=dict)


def text_of(message: Message) -> str:
    """Concatenate the text parts of one message (images dropped)."""
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def images_of(conversation: Conversation) -> list[Any]:
    """All image parts of a conversation, in order."""
    out = []
    for message in conversation:
        content = message["content"]
        if isinstance(content, str):
            continue
        out.extend(part["image"] for part in content if part.get("type") == "image")
    return out
