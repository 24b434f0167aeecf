"""GeneralPoints' reasoning template for CoT SFT data (``TaskSuite.thought``): the dealt cards, their
values, then the equation that reaches the target."""

from __future__ import annotations

import re
from typing import Any

_FORMULA = re.compile(r'"formula"\s*:\s*"([^"]*)"')


def gp_thought(options: dict[str, Any], info: dict[str, Any], answer: str) -> str:
    """Cards and their values from the env info, then the equation of the expert's answer."""
    cards = info.get("plain_cards") or []
    numbers = info.get("numbers") or []
    target = info.get("target", 24)
    parts = []
    if cards:
        parts.append(f"The cards are {', '.join(map(str, cards))}.")
    if numbers:
        parts.append(f"Their values are {', '.join(map(str, numbers))}; I must reach {target} using each once.")
    match = _FORMULA.search(answer)
    if match:
        parts.append(f"Combining them as {match.group(1).split('=')[0]} gives {target}.")
    return " ".join(parts)
