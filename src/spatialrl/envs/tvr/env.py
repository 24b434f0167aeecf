"""The TVR gymnasium env: reproduce a target viewpoint in a house, then say Stop.

Description
    The agent sees its current first-person image and a target image taken elsewhere in the same house
    (both badged "CURRENT"/"TARGET" like TVRBench) and answers in text. It succeeds iff it answers
    ``Stop`` at exactly the target pose (position within 0.01 m, yaw and pitch within 1°).

Action space
    The model's raw text. ``Action\\s*:\\s*([A-Za-z]+)`` (case-insensitive) must name one of the nine
    actions (case-insensitively). Anything else is an *invalid* answer: the turn is spent, the pose is
    unchanged and the invalid count grows. A parsed action that cannot run (blocked move, look beyond
    ±30°, an action outside a diagnostic task's mode) is a *failed* action: pose unchanged, step spent.

Observation space
    The current image, uint8 (height, width, 3), 640×360 by default.

Rewards (TVRBench's multi-turn GRPO reward, each component in ``info["record"]``)
    step −0.01; format +0.005 if the answer parsed (else −0.01); progress 1.0 × (d_min − d) when the pose
    distance d reaches a new minimum (not on the Stop step); on Stop +1.0 if success else −0.5.
    d = ‖Δxz‖ + 0.25·Δyaw/45° + 0.25·Δpitch/30° (circular yaw); ``distance="geodesic"`` swaps the
    straight-line metres for walking metres along the lattice.

Starting state
    The task's start pose (``reset(options={"task": record})``, ``{"task_id": id}``, or a task drawn
    from the pool with the env's seeded RNG); the target image is rendered at reset.

Episode end
    ``terminated`` on Stop; ``truncated`` when the budget runs out (30 steps single-room, 40 multi-room),
    which is a failure even at the target pose.

Arguments
    ``bench`` (bench folder) and ``split`` give the task pool; or ``tasks`` (a list of task records).
    ``reset(options={"task": record})`` or ``{"task_id": id}`` picks a task; otherwise one is drawn from
    the pool with the env's seeded RNG. ``width``/``height``, ``badges``, ``cache_mb`` (frame LRU, 0 =
    off), ``max_steps_single``/``max_steps_multi``, ``distance`` (``euclidean``/``geodesic``),
    ``copy_frames``: by default observations and ``info["target_image"]`` are the cache's *read-only*
    arrays (frames never change once rendered, so keeping them is safe, and a 640×360 copy per step would
    cost more than the rest of a cached step); ``copy_frames=True`` returns fresh writable copies, which
    gymnasium's ``check_env`` insists on.

Info keys
    ``target_image, valid_actions, pose, step, max_steps, task_id, expert_response,
    candidate_responses, record`` and, on the final step, ``episode``. ``expert_response`` is the
    oracle's next action from the *current* pose (BFS over the full pose graph), so it stays optimal
    after the agent deviates; an expert episode takes exactly ``optimal_steps`` steps (Stop included).

Version history
    v0: first version (TVRBench's lattice, actions, reward constants and success rule).
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.lattice import ACTIONS, GRID, MODE_ACTIONS, STOP, Pose, action_kind
from spatialrl.envs.tvr.scenes import render_service, scene_fingerprint, scene_lattice
from spatialrl.envs.tvr.tasks import open_bench, task_poses, validate_tasks
from spatialrl.errors import DataError

ACTION_RE = re.compile(r"Action\s*:\s*([A-Za-z]+)", re.IGNORECASE)
_CANONICAL = {a.lower(): a for a in ACTIONS}
CANDIDATE_RESPONSES = tuple(f"Action: {a}" for a in ACTIONS)
POS_TOL, YAW_TOL, PITCH_TOL = 0.01, 1.0, 1.0  # TVRBench's is_exact_match tolerances


class _TargetField:
    """Oracle distances to one target for every state, plus a memo of the expert's action per pose."""

    def __init__(self, lattice: Any, target: Pose, tie_break: str = oracle.DEFAULT_TIE_BREAK):
        self.lattice, self.tie_break = lattice, tie_break
        self.dist = oracle.distances_to(lattice, target)
        self.dist.setflags(write=False)
        self._expert: dict[Pose, str] = {}

    def expert(self, pose: Pose) -> str:
        action = self._expert.get(pose)
        if action is None:
            action = self._expert[pose] = oracle.next_action(self.lattice, pose, self.dist, self.tie_break)
        return action


@lru_cache(maxsize=1024)
def _target_field(scene_id: str, mode: str, target: Pose, tie_break: str = oracle.DEFAULT_TIE_BREAK) -> _TargetField:
    """Cached per (scene, mode, target): RL groups and repeated evals reset to the same targets."""
    return _TargetField(scene_lattice(scene_id, mode), target, tie_break)


@lru_cache(maxsize=256)
def _geodesic_field(scene_id: str, mode: str, cell: tuple[int, int]) -> dict[tuple[int, int], float]:
    return oracle.geodesic_metres(scene_lattice(scene_id, mode), cell)


def parse_action(text: str) -> str | None:
    """Canonical action name of an answer, or None when it names none of the nine."""
    m = ACTION_RE.search(text)
    return _CANONICAL.get(m.group(1).lower()) if m else None


@dataclass(frozen=True)
class RewardConfig:
    """TVRBench ``ThorViewEnvConfig`` constants (online RL, 2026-05-19 scale)."""

    step_penalty: float = 0.01
    format_valid_reward: float = 0.005
    format_invalid_penalty: float = 0.01
    progress_scale: float = 1.0
    success_reward: float = 1.0
    stop_fail_penalty: float = 0.5
    yaw_weight: float = 0.25  # per 45° step
    pitch_weight: float = 0.25  # per 30° step


def yaw_error(a: float, b: float) -> float:
    d = abs(a - b) % 360.0
    return min(d, 360.0 - d)


def pose_errors(pose: Pose, target: Pose) -> tuple[float, float, float]:
    """(xz metres, yaw degrees circular, pitch degrees) between two poses."""
    pos = math.hypot((pose.ix - target.ix) * GRID, (pose.iz - target.iz) * GRID)
    return pos, yaw_error(pose.yaw, target.yaw), float(abs(pose.pitch - target.pitch))


def is_exact_match(pose: Pose, target: Pose) -> bool:
    """TVRBench's success test: xz error < 0.01 m, yaw error < 1°, pitch error < 1°."""
    pos, yaw, pitch = pose_errors(pose, target)
    return pos < POS_TOL and yaw < YAW_TOL and pitch < PITCH_TOL


class TVREnv(gym.Env):
    __doc__ = __doc__
    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, bench: str | Path | None = None, split: str = "eval",
                 tasks: list[dict[str, Any]] | None = None, width: int = 640, height: int = 360,
                 badges: bool = True, cache_mb: float = 512.0, max_steps_single: int = 30,
                 max_steps_multi: int = 40, distance: str = "euclidean",
                 reward: RewardConfig | None = None, render_mode: str | None = None, copy_frames: bool = False,
                 expert_tie_break: str = oracle.DEFAULT_TIE_BREAK):
        for name, v in (("width", width), ("height", height), ("max_steps_single", max_steps_single),
                        ("max_steps_multi", max_steps_multi)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"TVREnv {name} must be a positive integer, got {v!r}")
        if distance not in ("euclidean", "geodesic"):
            raise ValueError(f"TVREnv distance must be 'euclidean' or 'geodesic', got {distance!r}")
        if expert_tie_break not in oracle.TIE_BREAKS:
            raise ValueError(f"TVREnv expert_tie_break must be one of {', '.join(oracle.TIE_BREAKS)}, "
                             f"got {expert_tie_break!r}")
        self.expert_tie_break = expert_tie_break
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"TVREnv render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.bench = open_bench(bench) if bench is not None else None
        self.split = split
        self._pool = validate_tasks(list(tasks), "tasks=") if tasks is not None else None
        self.width, self.height, self.badges = width, height, badges
        self.budgets = {"single": max_steps_single, "multi": max_steps_multi}
        self.distance, self.reward_cfg, self.render_mode = distance, reward or RewardConfig(), render_mode
        self.copy_frames = copy_frames
        self._checked: set[str] = set()
        self.renderer = render_service(width, height, cache_mb)
        self.observation_space = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.action_space = gym.spaces.Text(max_length=4096, min_length=0, charset=string.printable)
        self.task: dict[str, Any] | None = None
        self._done = True

    # -- task selection -------------------------------------------------------------------------------
    def _pool_tasks(self) -> list[dict[str, Any]]:
        if self._pool is not None:
            return self._pool
        if self.bench is not None:
            return self.bench.tasks(self.split)
        raise ValueError("TVREnv has no task pool: pass bench=DIR or tasks=[...], or reset with "
                         "options={'task': record}")

    def _select_task(self, options: dict[str, Any]) -> dict[str, Any]:
        if "task" in options:
            return validate_tasks([options["task"]], "reset options['task']")[0]
        if "task_id" in options:
            tid = options["task_id"]
            if self._pool is not None:
                for t in self._pool:
                    if t["task_id"] == tid:
                        return t
                raise DataError(f"unknown task id {tid!r} (not in this env's tasks)")
            if self.bench is None:
                raise DataError(f"unknown task id {tid!r}: this env has no bench to look it up in")
            return self.bench.task(tid, self.split)
        pool = self._pool_tasks()
        return pool[int(self.np_random.integers(len(pool)))]

    # -- gym API --------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task = self._select_task(options or {})
        scene = task["scene"]
        self._check_scene(scene)
        lattice = scene_lattice(scene, task["mode"])
        start, target = task_poses(task)
        for name, pose in (("start", start), ("target", target)):
            if pose.cell not in lattice.cell_set:
                raise DataError(f"task {task['task_id']}: {name} cell {pose.cell} is not reachable in {scene}")
        self.task, self.lattice, self.scene_id = task, lattice, scene
        self.start, self.target, self.pose = start, target, start
        self.max_steps = self.budgets[task["dataset"]]
        self._field = _target_field(scene, task["mode"], target, self.expert_tie_break)
        self.optimal_steps = oracle.optimal_steps(lattice, start, target, self._field.dist)
        self._geo = _geodesic_field(scene, task["mode"], target.cell) if self.distance == "geodesic" else None
        self.target_image = self.renderer.frame(scene, target, "TARGET" if self.badges else None)
        self.t = 0
        self._d_min = self.pose_distance(start)
        self._poses = [start]
        self._visited = {start}
        self._counts = dict.fromkeys(("translation", "rotation", "look", "stop", "invalid"), 0)
        self._invalid = self._failed = self._revisits = 0
        self._reward_totals = dict.fromkeys(("step", "format", "progress", "terminal"), 0.0)
        self._stopped = self._success = False
        self._done = False
        return self._observation(), self._info(record=None)

    def step(self, action: str):
        if self._done:
            raise RuntimeError("TVREnv.step called after the episode ended; call reset() first")
        if not isinstance(action, str):
            raise TypeError(f"TVREnv actions are the model's text (str), got {type(action).__name__}")
        cfg = self.reward_cfg
        prev, expert = self.pose, self._expert  # the expert's answer shown with the last observation
        parsed = parse_action(action)
        self.t += 1
        self._counts[action_kind(parsed)] += 1
        r_step, r_progress, r_terminal = -cfg.step_penalty, 0.0, 0.0
        r_format = cfg.format_valid_reward if parsed is not None else -cfg.format_invalid_penalty
        failure = None
        terminated = False
        if parsed is None:
            self._invalid += 1
            failure = "unparsable"
        elif parsed == STOP:
            terminated = self._stopped = True
            self._success = is_exact_match(self.pose, self.target)
            r_terminal = cfg.success_reward if self._success else -cfg.stop_fail_penalty
        else:
            self.pose, ok = self.lattice.step(prev, parsed)
            if not ok:
                self._failed += 1
                failure = ("not_allowed" if parsed not in MODE_ACTIONS[self.lattice.mode]
                           else "tilt_limit" if parsed in ("LookUp", "LookDown") else "blocked")
        d = self.pose_distance(self.pose)
        if not terminated and d < self._d_min:
            r_progress = cfg.progress_scale * (self._d_min - d)
            self._d_min = d
        if self.pose != prev:
            if self.pose in self._visited:
                self._revisits += 1
            self._visited.add(self.pose)
        self._poses.append(self.pose)
        truncated = not terminated and self.t >= self.max_steps
        self._done = terminated or truncated
        for k, v in (("step", r_step), ("format", r_format), ("progress", r_progress), ("terminal", r_terminal)):
            self._reward_totals[k] += v
        record = {
            "step": self.t,
            "action": parsed,
            "valid": parsed is not None,
            "move_failed": parsed is not None and parsed != STOP and failure is not None,
            "failure": failure,
            "prev_pose": list(prev),
            "pose": list(self.pose),
            "expert_action": expert,
            "distance": d,
            "reward_step": r_step,
            "reward_format": r_format,
            "reward_progress": r_progress,
            "reward_terminal": r_terminal,
        }
        reward = r_step + r_format + r_progress + r_terminal
        info = self._info(record)
        if self._done:
            info["episode"] = self._episode_summary()
        return self._observation(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode == "rgb_array" and self.task is not None:
            return self._observation()
        return None

    # -- helpers --------------------------------------------------------------------------------------
    def _check_scene(self, scene: str) -> None:
        if self.bench is None or scene in self._checked:
            return
        recorded = self.bench.fingerprint(scene)
        if recorded is not None and recorded != scene_fingerprint(scene):
            raise DataError(f"{self.bench.root}: scene {scene} no longer matches the house this bench was made "
                            "with (the house generator changed); regenerate the bench with "
                            "`spatialrl tvr make-bench`")
        self._checked.add(scene)

    def pose_distance(self, pose: Pose) -> float:
        """TVRBench's pose distance to the target (straight-line or geodesic position term)."""
        cfg, tgt = self.reward_cfg, self.target
        if self._geo is not None and pose.cell in self._geo:
            pos = self._geo[pose.cell]
        else:
            pos = math.hypot((pose.ix - tgt.ix) * GRID, (pose.iz - tgt.iz) * GRID)
        return pos + cfg.yaw_weight * yaw_error(pose.yaw, tgt.yaw) / 45.0 + cfg.pitch_weight * abs(
            pose.pitch - tgt.pitch) / 30.0

    def _observation(self) -> np.ndarray:
        frame = self.renderer.frame(self.scene_id, self.pose, "CURRENT" if self.badges else None)
        return frame.copy() if self.copy_frames else frame

    def _house_y(self) -> float:
        return float(self.task["target"]["position"]["y"])

    def _info(self, record: dict[str, Any] | None) -> dict[str, Any]:
        expert = self._expert = self._field.expert(self.pose)
        info = {
            "target_image": self.target_image.copy() if self.copy_frames else self.target_image,
            "valid_actions": self.lattice.valid_actions(self.pose),
            "pose": self.pose.to_dict(self._house_y()),
            "step": self.t,
            "max_steps": self.max_steps,
            "task_id": self.task["task_id"],
            "expert_response": f"Action: {expert}",
            "candidate_responses": list(CANDIDATE_RESPONSES),
        }
        if record is not None:
            info["record"] = record
        return info

    def _episode_summary(self) -> dict[str, Any]:
        task = self.task
        pos_err, yaw_err, pitch_err = pose_errors(self.pose, self.target)
        return {
            "task_id": task["task_id"],
            "scene": task["scene"],
            "dataset": task["dataset"],
            "difficulty": task["difficulty"],
            "category": task["category"],
            "mode": task["mode"],
            "success": self._success,
            "stopped": self._stopped,
            "steps": self.t,
            "max_steps": self.max_steps,
            "optimal_steps": self.optimal_steps,
            "final_pos_error": pos_err,
            "final_yaw_error": yaw_err,
            "final_pitch_error": pitch_err,
            "invalid_actions": self._invalid,
            "failed_actions": self._failed,
            "distinct_cells": len({p.cell for p in self._poses}),
            "revisits": self._revisits,
            "action_counts": dict(self._counts),
            "reward_totals": dict(self._reward_totals),
            "poses": [list(p) for p in self._poses],
            "start": list(self.start),
            "target": list(self.target),
        }
