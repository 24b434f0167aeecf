"""Parsing a model's answer and the verifier's reward and message (notes §1.8, §2.3).

The answer is free text. A field is read with ``json.loads(text)[field]``, else the first match of
``"field": "(.*?)"`` (one space after the colon, double quotes), else the string ``"None"``. The expert
answer has a trailing comma, so it is always read by the regex — as in the reference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

REWARDS = {"CORRECT_ACTION": 1.0, "INCORRECT_ACTION": -1.0, "INCORRECT_OBS": -1.5, "INCORRECT_INSTRUCTION": -1.75}

# Not .format()-ed in the reference, so the doubled braces are literal text the model sees.
FORMAT_TOKEN = (
    "\n[Output]\n{{\n"
    '  "current observation": latest observation from the streetview grid,\n'
    '  "current instruction": analyze the full instruction and identify the sentence to be executed,\n'
    '  "action": the action to be taken chosen from the action space,\n'
    "}}"
)
MSG_CORRECT = "Correct action"
MSG_NOT_AT_INTERSECTION = (
    "you are not at any intersection. Please avoid this observation and try again in the same format:" + FORMAT_TOKEN
)
MSG_AT_INTERSECTION = (
    "you are at an intersection. Please avoid this observation and try again in the same format:" + FORMAT_TOKEN
)
MSG_WRONG_ACTION = "you make incorrect action. Please avoid this action and try again in the same format:" + FORMAT_TOKEN
MSG_BUDGET = "Exceed maximum verify steps"

_PATTERNS = {
    "action": re.compile(r'"action": "(.*?)"'),
    "current observation": re.compile(r'"current observation": "(.*?)"'),
    "current instruction": re.compile(r'"current instruction": "(.*?)"'),
}


def read_field(text: str, name: str) -> str:
    """The reference's ``re_match``: JSON field, else regex, else ``"None"``."""
    try:
        value = json.loads(text)[name]
        return value if isinstance(value, str) else str(value)
    except Exception:
        pass
    m = _PATTERNS[name].search(text)
    return m.group(1) if m else "None"


@dataclass(frozen=True)
class Verdict:
    reward: float
    message: str  # the "Verify Info" text, ending with "."
    action: str  # parsed action ("None" when unreadable)
    observation: str  # parsed "current observation"


def verify(text: str, gt_action: str, gt_says_intersection: bool) -> Verdict:
    """Score one answer. ``gt_says_intersection`` is what the answer's intersection claim is compared with:
    faithfully, ``'intersection' in <landmark text>`` (almost always False); with the fix, whether the
    agent really is at an intersection."""
    action = read_field(text, "action")
    obs = read_field(text, "current observation")
    if action == gt_action:
        reward, msg = REWARDS["CORRECT_ACTION"], MSG_CORRECT
    elif "intersection" in obs and not gt_says_intersection:
        reward, msg = REWARDS["INCORRECT_OBS"], MSG_NOT_AT_INTERSECTION
    elif "intersection" not in obs and gt_says_intersection:
        reward, msg = REWARDS["INCORRECT_OBS"], MSG_AT_INTERSECTION
    else:
        reward, msg = REWARDS["INCORRECT_ACTION"], MSG_WRONG_ACTION
    return Verdict(reward=reward, message=", ".join([msg]) + ".", action=action, observation=obs)
