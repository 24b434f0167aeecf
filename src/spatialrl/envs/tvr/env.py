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
    expert_responses, candidate_responses, record`` and, on the final step, ``episode``.
    ``expert_response`` is the oracle's next action from the *current* pose (BFS over the full pose
    graph), so it stays optimal after the agent deviates; an expert episode takes exactly
    ``optimal_steps`` steps (Stop included). ``expert_responses`` lists every optimal action there, in
    tie-break order (its first entry is ``expert_response``).

Version history
    v0: first version (TVRBench's lattice, actions, reward constants and success rule).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.episode import (  # noqa: F401  (re-exported: the env's public helpers)
    ACTION_RE,
    CANDIDATE_RESPONSES,
    PITCH_TOL,
    POS_TOL,
    YAW_TOL,
    Episode,
    RewardConfig,
    TaskPool,
    check_env_args,
    is_exact_match,
    parse_action,
    pose_errors,
    yaw_error,
)
from spatialrl.envs.tvr.lattice import Pose
from spatialrl.envs.tvr.scenes import render_service


class TVREnv(gym.Env):
    __doc__ = __doc__
    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, bench: str | Path | None = None, split: str = "eval",
                 tasks: list[dict[str, Any]] | None = None, width: int = 640, height: int = 360,
                 badges: bool = True, cache_mb: float = 512.0, max_steps_single: int = 30,
                 max_steps_multi: int = 40, distance: str = "euclidean",
                 reward: RewardConfig | None = None, render_mode: str | None = None, copy_frames: bool = False,
                 expert_tie_break: str = oracle.DEFAULT_TIE_BREAK):
        check_env_args("TVREnv", width=width, height=height, max_steps_single=max_steps_single,
                       max_steps_multi=max_steps_multi, distance=distance, expert_tie_break=expert_tie_break)
        self.expert_tie_break = expert_tie_break
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"TVREnv render_mode must be None or 'rgb_array', got {render_mode!r}")
        self._tasks = TaskPool(bench, split, tasks, owner="TVREnv")
        self.bench, self.split = self._tasks.bench, split
        self.width, self.height, self.badges = width, height, badges
        self.budgets = {"single": max_steps_single, "multi": max_steps_multi}
        self.distance, self.reward_cfg, self.render_mode = distance, reward or RewardConfig(), render_mode
        self.copy_frames = copy_frames
        self.renderer = render_service(width, height, cache_mb)
        self.observation_space = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.action_space = gym.spaces.Text(max_length=4096, min_length=0, charset=string.printable)
        self.episode: Episode | None = None

    # -- the episode's state (see episode.py) ---------------------------------------------------------
    @property
    def task(self) -> dict[str, Any] | None:
        return None if self.episode is None else self.episode.task

    @property
    def pose(self) -> Pose:
        return self.episode.pose

    @property
    def start(self) -> Pose:
        return self.episode.start

    @property
    def target(self) -> Pose:
        return self.episode.target

    @property
    def lattice(self) -> Any:
        return self.episode.lattice

    @property
    def scene_id(self) -> str:
        return self.episode.scene_id

    @property
    def t(self) -> int:
        return self.episode.t

    @property
    def max_steps(self) -> int:
        return self.episode.max_steps

    @property
    def optimal_steps(self) -> int:
        return self.episode.optimal_steps

    def pose_distance(self, pose: Pose) -> float:
        """TVRBench's pose distance to the target (straight-line or geodesic position term)."""
        return self.episode.pose_distance(pose)

    # -- gym API --------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task = self._tasks.select(options or {}, self.np_random)
        self._tasks.check_scene(task["scene"])
        self.episode = Episode(task, max_steps=self.budgets[task["dataset"]], distance=self.distance,
                               reward=self.reward_cfg, tie_break=self.expert_tie_break)
        self.target_image = self.renderer.frame(task["scene"], self.episode.target,
                                                "TARGET" if self.badges else None)
        return self._observation(), self._info(record=None)

    def step(self, action: str):
        if self.episode is None:
            raise RuntimeError("TVREnv.step called after the episode ended; call reset() first")
        reward, terminated, truncated, record = self.episode.step(action)
        return self._observation(), reward, terminated, truncated, self._info(record)

    def render(self) -> np.ndarray | None:
        if self.render_mode == "rgb_array" and self.episode is not None:
            return self._observation()
        return None

    # -- helpers --------------------------------------------------------------------------------------
    def _observation(self) -> np.ndarray:
        frame = self.renderer.frame(self.scene_id, self.pose, "CURRENT" if self.badges else None)
        return frame.copy() if self.copy_frames else frame

    def _info(self, record: dict[str, Any] | None) -> dict[str, Any]:
        target = self.target_image.copy() if self.copy_frames else self.target_image
        return self.episode.info(target, record)
