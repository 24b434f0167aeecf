"""V-IRL's reasoning template for CoT SFT data (``TaskSuite.thought``).

From the oracle observation and the current route instruction (what the SFTvsRL expert JSON states),
then why the ground-truth action follows from them. The thought never contains ``"action": "``, so the
env's parser still reads the answer after the think block.
"""

from __future__ import annotations

from typing import Any


def _virl_reason(action: str) -> str:
    if action.startswith("forward"):
        return "Nothing here tells me to turn, so I keep walking."
    if action.startswith("stop"):
        return "The destination is here, so I stop."
    if action.startswith("turn_direction("):
        return f"The instruction tells me to turn {action[len('turn_direction('):].rstrip(')')} here."
    return ""


def virl_thought(options: dict[str, Any], info: dict[str, Any], answer: str) -> str:
    observation = str(info.get("current_obs", "")).strip().rstrip(";").strip()
    instruction = str(info.get("current_instruction", "")).strip()
    gt = str(info.get("gt_action", ""))
    return " ".join(p for p in (f"I observe: {observation}." if observation else "",
                                f"The instruction I am following is: {instruction}" if instruction else "",
                                _virl_reason(gt)) if p)
