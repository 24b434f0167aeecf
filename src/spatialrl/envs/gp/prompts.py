"""GeneralPoints prompts: the reference's text, byte for byte, and its retry turns.

The templates are ``prompt_lib/prompts.py``'s ``Q_GeneralPoint_EQN_{VL,L}`` (and the ``_EG`` forms with
an output example, which the reference's API evaluation configs use; option ``example=true``). They are
filled with ``target_number`` and the reference's ``face_card_msg``, whose own trailing period yields
the reference's "count as '10'., and each card" — kept, since the reference's models were trained and
measured on exactly this text. L mode lists the cards as a Python list (``Cards: ['A', '3', 'K', '6']``).

The conversation (``evaluation/evaluator/api_evaluator.py``): one user turn (VL: the table image first,
then the text), the model's answer, and after each failed answer a user turn
``You failed this trial because {verifier message}`` — the growing chat the model answers again.
"""

from __future__ import annotations

from typing import Any

from spatialrl.conversation import Conversation, Message
from spatialrl.envs.gp.variants import face_card_message

Q_EQN_VL = """
[Task Description]
You are an expert {target_number} points card game player. You are observing these four cards in the image.
Note that {face_card_msg}, and each card must be used once.
Your goal is to output a formula that evaluates to {target_number} using numbers from the cards and operators such as '+', '-', '*', '/', '(', ')', and '='.

[Output]
Your response should be a valid json file in the following format:
{{
  "cards": [x, y, z, w], where {face_card_msg},
  "number": [a, b, c, d], where a, b, c, and d are the numbers on the cards,
  "formula": 'an equation that equals {target_number}',
}}

"""

Q_EQN_L = """
[Task Description]
You are an expert {target_number} points card game player. You will receive a set of 4 cards.
Note that {face_card_msg}, and each card must be used once.
Your goal is to output a formula that evaluates to {target_number} using numbers from the cards and operators such as '+', '-', '*', '/', '(', ')', and '='.

[Input]
Cards: {cards}

[Output]
{{
  "cards": [x, y, z, w], where {face_card_msg},
  "number": [a, b, c, d], where a, b, c, and d are the numbers on the cards,
  "formula": 'an equation that equals {target_number}',
}}

"""

# The _EG templates are the plain ones with this block in place of the final blank line.
EXAMPLE_BLOCK = """
[Output Example]
{{
  "cards": [4, 3, 2, K],
  "number": [4, 3, 2, 10],
  "formula": "4*3+2+10=24",
}}

Please only output the json.
"""
Q_EQN_VL_EG = Q_EQN_VL[:-1] + EXAMPLE_BLOCK
Q_EQN_L_EG = Q_EQN_L[:-1] + EXAMPLE_BLOCK
RETRY_PREFIX = "You failed this trial because "
# Ours, not the reference's (it has no reasoning variant): appended when ``cot`` is on, to match the
# ``<think>…</think>`` + answer format of CoT SFT data (train/data.py). The answer parser reads the
# JSON fields after the think block.
COT_INSTRUCTION = "First reason step by step inside <think>...</think>, then give your answer in the format above.\n"


def task_prompt(info: dict[str, Any], mode: str, example: bool = False, cot: bool = False) -> str:
    """The first user text of an episode, from the env's ``info`` (hand, rule, target)."""
    if mode == "vl":
        template = Q_EQN_VL_EG if example else Q_EQN_VL
    elif mode == "l":
        template = Q_EQN_L_EG if example else Q_EQN_L
    else:
        raise ValueError(f"gp prompt mode must be 'vl' or 'l', got {mode!r}")
    text = template.format(
        target_number=str(info["target"]),
        face_card_msg=face_card_message(bool(info["face_cards_as_10"])),
        cards=repr(list(info["plain_cards"])),
    )
    return text + COT_INSTRUCTION if cot else text


def _text(role: str, text: str) -> Message:
    return {"role": role, "content": [{"type": "text", "text": text}]}


class GPPrompter:
    """One episode's chat: the task prompt, then (answer, "You failed this trial because ...") pairs."""

    def __init__(self, mode: str = "vl", example: bool = False, cot: bool = False):
        if mode not in ("vl", "l"):
            raise ValueError(f"gp prompt mode must be 'vl' or 'l', got {mode!r}")
        self.mode, self.example, self.cot = mode, bool(example), bool(cot)
        self._messages: Conversation = []

    def reset(self, obs: Any, info: dict[str, Any]) -> None:
        text = task_prompt(info, self.mode, self.example, self.cot)
        if self.mode == "vl":
            content = [{"type": "image", "image": obs}, {"type": "text", "text": text}]
            self._messages = [{"role": "user", "content": content}]
        else:
            self._messages = [_text("user", text)]

    def update(self, response: str, obs: Any, info: dict[str, Any]) -> None:
        self._messages = self._messages + [_text("assistant", response)]
        if not info.get("success") and info.get("verify_info") is not None:
            self._messages.append(_text("user", RETRY_PREFIX + str(info["verify_info"])))

    def messages(self) -> Conversation:
        return list(self._messages)


def tokenizer_corpus() -> list[str]:
    """Prompts, answers and verifier turns of real (L-mode, no rendering) episodes, deterministic, for
    training the built-in model's tokenizer."""
    from spatialrl.envs.gp.env import GeneralPointsEnv

    texts: list[str] = []
    for mode in ("vl", "l"):
        for face10 in (True, False):
            for example in (False, True):
                info = {"target": 24, "face_cards_as_10": face10, "plain_cards": ["A", "3", "K", "6"]}
                texts.append(task_prompt(info, mode, example, cot=example))
    env = GeneralPointsEnv(mode="l", split="in-dist")
    seen: set[str] = set()
    for k in range(48):
        split = ("in-dist", "rule-ood", "visual-ood")[k % 3]
        _, info = env.reset(seed=k, options={"split": split})
        texts.append(task_prompt(info, "l"))
        texts.append(info["expert_response"])
        if k % 4 == 0:  # the shape of a CoT answer
            texts.append(f"<think>The cards are {', '.join(info['plain_cards'])}. Their values are "
                         f"{', '.join(map(str, info['numbers']))}; I must reach 24 using each once.</think>\n"
                         + info["expert_response"])
        for candidate in info["candidate_responses"][:5]:
            _, _, terminated, truncated, step_info = env.step(candidate)
            message = RETRY_PREFIX + str(step_info["verify_info"])
            if message not in seen:
                seen.add(message)
                texts.append(message)
            if terminated or truncated:
                break
        texts.append(info["candidate_responses"][-1])
    return texts
