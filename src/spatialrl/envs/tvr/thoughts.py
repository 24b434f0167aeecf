"""TVR's reasoning template for CoT SFT data (``TaskSuite.thought``).

From the pose difference between the current and the target viewpoint, expressed in the agent's frame
(metres ahead/right, degrees of turn and tilt), then why the oracle's action helps. The thought never
contains ``Action:``, so the env's parser still reads the answer after the think block.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from spatialrl.errors import DataError


@lru_cache(maxsize=8)
def _bench(path: str) -> Any:
    from spatialrl.envs.tvr.tasks import Bench

    return Bench(path)


def _tvr_target(options: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The target viewpoint record: from ``info`` when the env reports it, else from the bench by task id."""
    if "target_pose" in info:
        return info["target_pose"]
    bench = options.get("data") or options.get("bench")
    if not bench:
        raise DataError("TVR CoT needs the target pose: the env info has no 'target_pose' and no bench folder "
                        "(--data) was given to look the task up")
    return _bench(str(bench)).task(info["task_id"])["target"]


def _metres(v: float) -> str:
    return f"{abs(v):.2f} m"


def tvr_pose_difference(current: dict[str, Any], target: dict[str, Any]) -> dict[str, float]:
    """Target minus current in the agent's frame: metres ahead / to the right, degrees of clockwise turn
    (yaw, AI2-THOR: 0 = +z, 90 = +x) and of downward tilt (horizon, + = down)."""
    yaw = math.radians(current["rotation_y"])
    dx = target["position"]["x"] - current["position"]["x"]
    dz = target["position"]["z"] - current["position"]["z"]
    ahead = dx * math.sin(yaw) + dz * math.cos(yaw)
    right = dx * math.cos(yaw) - dz * math.sin(yaw)
    turn = (target["rotation_y"] - current["rotation_y"] + 180.0) % 360.0 - 180.0
    tilt = target["horizon"] - current["horizon"]
    return {"ahead": round(ahead, 3), "right": round(right, 3), "turn": round(turn, 1), "tilt": round(tilt, 1)}


_TVR_REASON = {
    "MoveAhead": "Stepping forward is the first move of the shortest way there.",
    "MoveBack": "Stepping back is the first move of the shortest way there.",
    "MoveLeft": "Stepping left is the first move of the shortest way there.",
    "MoveRight": "Stepping right is the first move of the shortest way there.",
    "RotateRight": "Turning right is the first move of the shortest way there.",
    "RotateLeft": "Turning left is the first move of the shortest way there.",
    "LookUp": "Tilting the camera up is the first move of the shortest way there.",
    "LookDown": "Tilting the camera down is the first move of the shortest way there.",
    "Stop": "My view matches the target view, so I am done.",
}


def tvr_thought(options: dict[str, Any], info: dict[str, Any], answer: str) -> str:
    d = tvr_pose_difference(info["pose"], _tvr_target(options, info))
    parts = []
    if abs(d["ahead"]) < 0.01 and abs(d["right"]) < 0.01:
        parts.append("I am standing where the target view was taken.")
    else:
        ahead = f"{_metres(d['ahead'])} {'ahead' if d['ahead'] > 0 else 'behind'}" if abs(d["ahead"]) >= 0.01 else ""
        side = f"{_metres(d['right'])} to my {'right' if d['right'] > 0 else 'left'}" if abs(d["right"]) >= 0.01 else ""
        parts.append(f"The target view was taken {' and '.join(p for p in (ahead, side) if p)}.")
    if abs(d["turn"]) < 1:
        parts.append("It faces the same way as I do")
    elif abs(d["turn"]) > 179:
        parts.append("It faces the opposite way")
    else:
        parts.append(f"It faces {abs(d['turn']):.0f} degrees to my {'right' if d['turn'] > 0 else 'left'}")
    if abs(d["tilt"]) < 1:
        parts[-1] += " with the same camera tilt."
    else:
        parts[-1] += f" and looks {abs(d['tilt']):.0f} degrees further {'down' if d['tilt'] > 0 else 'up'}."
    action = answer.split(":", 1)[-1].strip()
    parts.append(_TVR_REASON.get(action, ""))
    return " ".join(p for p in parts if p)
