"""One TVR episode without its pixels: task pool, move rule, budget, rewards, success, oracle and records.

``TVREnv`` (one episode, renders each frame on its own) and ``TVRVectorEnv`` (N episodes, renders every
frame of a step in one batch) are both thin shells around this module, so the rules live in one place:

* :class:`TaskPool` — the task pool (bench split or a list of records), task selection from reset
  options or the env's seeded RNG, and the bench's house-fingerprint check;
* :class:`Episode` — the state of one episode from its task: ``step(text)`` applies the answer (parse,
  move rule, budget, TVRBench's reward, success) and returns ``(reward, terminated, truncated, record)``;
  ``info(target_image, record)`` and ``summary()`` build the env's info and episode summary;
* the pure helpers ``parse_action``, ``pose_errors``, ``is_exact_match``, ``RewardConfig``.

Frames are not rendered here: the shells ask for ``(scene_id, pose, label)`` frames and render them as
they like (one per call, or a batch per step); see ``docs/tvr.md`` and ``docs/rendering.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.lattice import ACTIONS, GRID, MODE_ACTIONS, STOP, Pose, action_kind
from spatialrl.envs.tvr.scenes import scene_fingerprint, scene_lattice
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
        self._optimal: dict[Pose, tuple[str, ...]] = {}

    def optimal(self, pose: Pose) -> tuple[str, ...]:
        """Every optimal action at ``pose``, tie-break order (the first is the expert's)."""
        actions = self._optimal.get(pose)
        if actions is None:
            actions = self._optimal[pose] = tuple(
                oracle.ranked_optimal_actions(self.lattice, pose, self.dist, self.tie_break))
        return actions

    def expert(self, pose: Pose) -> str:
        return self.optimal(pose)[0]


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


def check_env_args(owner: str, *, width: int, height: int, max_steps_single: int, max_steps_multi: int,
                   distance: str, expert_tie_break: str) -> None:
    """The constructor checks shared by ``TVREnv`` and ``TVRVectorEnv`` (``owner`` names the class)."""
    for name, v in (("width", width), ("height", height), ("max_steps_single", max_steps_single),
                    ("max_steps_multi", max_steps_multi)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{owner} {name} must be a positive integer, got {v!r}")
    if distance not in ("euclidean", "geodesic"):
        raise ValueError(f"{owner} distance must be 'euclidean' or 'geodesic', got {distance!r}")
    if expert_tie_break not in oracle.TIE_BREAKS:
        raise ValueError(f"{owner} expert_tie_break must be one of {', '.join(oracle.TIE_BREAKS)}, "
                         f"got {expert_tie_break!r}")


class TaskPool:
    """Where an env's tasks come from: a bench split or a list of task records."""

    def __init__(self, bench: str | Path | None, split: str, tasks: list[dict[str, Any]] | None, owner: str = "TVREnv"):
        self.bench = open_bench(bench) if bench is not None else None
        self.split = split
        self.pool = validate_tasks(list(tasks), "tasks=") if tasks is not None else None
        self.owner = owner
        self._checked: set[str] = set()

    def tasks(self) -> list[dict[str, Any]]:
        if self.pool is not None:
            return self.pool
        if self.bench is not None:
            return self.bench.tasks(self.split)
        raise ValueError(f"{self.owner} has no task pool: pass bench=DIR or tasks=[...], or reset with "
                         "options={'task': record}")

    def select(self, options: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """The task that reset ``options`` name (``task`` record or ``task_id``), else one drawn with ``rng``."""
        if "task" in options:
            return validate_tasks([options["task"]], "reset options['task']")[0]
        if "task_id" in options:
            tid = options["task_id"]
            if self.pool is not None:
                for t in self.pool:
                    if t["task_id"] == tid:
                        return t
                raise DataError(f"unknown task id {tid!r} (not in this env's tasks)")
            if self.bench is None:
                raise DataError(f"unknown task id {tid!r}: this env has no bench to look it up in")
            return self.bench.task(tid, self.split)
        pool = self.tasks()
        return pool[int(rng.integers(len(pool)))]

    def check_scene(self, scene: str) -> None:
        """Refuse a bench whose house for ``scene`` changed since the bench was made."""
        if self.bench is None or scene in self._checked:
            return
        recorded = self.bench.fingerprint(scene)
        if recorded is not None and recorded != scene_fingerprint(scene):
            raise DataError(f"{self.bench.root}: scene {scene} no longer matches the house this bench was made "
                            "with (the house generator changed); regenerate the bench with "
                            "`spatialrl tvr make-bench`")
        self._checked.add(scene)


class Episode:
    """One TVR episode's state and rules (no pixels). ``labels`` are the badges of the frames it needs."""

    def __init__(self, task: dict[str, Any], *, max_steps: int, distance: str = "euclidean",
                 reward: RewardConfig | None = None, tie_break: str = oracle.DEFAULT_TIE_BREAK):
        scene = task["scene"]
        lattice = scene_lattice(scene, task["mode"])
        start, target = task_poses(task)
        for name, pose in (("start", start), ("target", target)):
            if pose.cell not in lattice.cell_set:
                raise DataError(f"task {task['task_id']}: {name} cell {pose.cell} is not reachable in {scene}")
        self.task, self.lattice, self.scene_id = task, lattice, scene
        self.start, self.target, self.pose = start, target, start
        self.max_steps = max_steps
        self.reward_cfg = reward or RewardConfig()
        self._field = _target_field(scene, task["mode"], target, tie_break)
        self.optimal_steps = oracle.optimal_steps(lattice, start, target, self._field.dist)
        self._geo = _geodesic_field(scene, task["mode"], target.cell) if distance == "geodesic" else None
        self.t = 0
        self._d_min = self.pose_distance(start)
        self._poses = [start]
        self._visited = {start}
        self._counts = dict.fromkeys(("translation", "rotation", "look", "stop", "invalid"), 0)
        self._invalid = self._failed = self._revisits = 0
        # imitation diagnostics: answers equal to the oracle's; answers that repeat the previous one, and
        # how often the oracle would have repeated it (a policy far above the oracle copies its history)
        self._agree = self._repeats = self._oracle_repeats = self._repeat_chances = 0
        self._last: str | None = None
        self._reward_totals = dict.fromkeys(("step", "format", "progress", "terminal"), 0.0)
        self._stopped = self._success = False
        self.done = False

    def pose_distance(self, pose: Pose) -> float:
        """TVRBench's pose distance to the target (straight-line or geodesic position term)."""
        cfg, tgt = self.reward_cfg, self.target
        if self._geo is not None and pose.cell in self._geo:
            pos = self._geo[pose.cell]
        else:
            pos = math.hypot((pose.ix - tgt.ix) * GRID, (pose.iz - tgt.iz) * GRID)
        return pos + cfg.yaw_weight * yaw_error(pose.yaw, tgt.yaw) / 45.0 + cfg.pitch_weight * abs(
            pose.pitch - tgt.pitch) / 30.0

    def expert(self) -> str:
        """The oracle's next action from the current pose."""
        return self._field.expert(self.pose)

    def step(self, action: str) -> tuple[float, bool, bool, dict[str, Any]]:
        """Apply one answer: ``(reward, terminated, truncated, record)``; the pose moves as the rules say."""
        if self.done:
            raise RuntimeError("TVREnv.step called after the episode ended; call reset() first")
        if not isinstance(action, str):
            raise TypeError(f"TVREnv actions are the model's text (str), got {type(action).__name__}")
        cfg = self.reward_cfg
        prev, expert = self.pose, self.expert()  # the expert's answer shown with the last observation
        parsed = parse_action(action)
        self.t += 1
        self._counts[action_kind(parsed)] += 1
        self._agree += parsed == expert
        if self._last is not None:
            self._repeat_chances += 1
            self._repeats += parsed == self._last
            self._oracle_repeats += expert == self._last
        self._last = parsed
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
        self.done = terminated or truncated
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
        return r_step + r_format + r_progress + r_terminal, terminated, truncated, record

    def info(self, target_image: np.ndarray | None, record: dict[str, Any] | None) -> dict[str, Any]:
        """The env's info dict at the current pose (``target_image`` left out when None); with
        ``episode`` (the summary) once the episode is over."""
        info: dict[str, Any] = {} if target_image is None else {"target_image": target_image}
        info.update({
            "valid_actions": self.lattice.valid_actions(self.pose),
            "pose": self.pose.to_dict(float(self.task["target"]["position"]["y"])),
            "step": self.t,
            "max_steps": self.max_steps,
            "task_id": self.task["task_id"],
            "expert_response": f"Action: {self.expert()}",
            # the whole optimal set (tie-break order, first = expert_response): all-optimal SFT labels
            "expert_responses": [f"Action: {a}" for a in self._field.optimal(self.pose)],
            "candidate_responses": list(CANDIDATE_RESPONSES),
        })
        if record is not None:
            info["record"] = record
            if self.done:
                info["episode"] = self.summary()
        return info

    def summary(self) -> dict[str, Any]:
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
            "oracle_agreements": self._agree,
            "repeats": self._repeats,
            "oracle_repeats": self._oracle_repeats,
            "repeat_chances": self._repeat_chances,
            "action_counts": dict(self._counts),
            "reward_totals": dict(self._reward_totals),
            "poses": [list(p) for p in self._poses],
            "start": list(self.start),
            "target": list(self.target),
        }
