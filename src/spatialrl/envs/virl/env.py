"""`spatialrl/VIRL-v0`: V-IRL street-view route following on a fixed ground-truth rail.

The action is the model's raw text (a JSON-ish answer); the env parses and verifies it itself.

Episode
    ``reset`` picks a route (``options["route_idx"]``, or a reference-compatible random stream, see
    below), draws the start heading and the rail (:mod:`~spatialrl.envs.virl.rail`). The agent must
    answer the ground-truth action at every rail point: ``turn_direction(...)`` at the start and at each
    intersection, ``forward()`` in between, ``stop()`` at the destination.

Observation
    VL mode: the 2×2 street-view grid at the current point (uint8, ``grid_size``² × 3). L mode: the
    current oracle observation string (the reference returns ``None``; a string keeps the space honest).
    ``info["obs_act_seq"]`` is the prompt's history; in VL mode its current line says "You observe an
    intersection" when the agent is at one (the reference), unless ``intersection_in_text=False`` (the
    vision-required variant, VL only: the line is the same at every point, the grid must tell).

Rewards (notes §1.8)
    +1 correct (advance one point; ``stop()`` ends the episode with success); −1 wrong; −1.5 for an
    answer whose observation mentions an "intersection" where the verifier thinks there is none
    (faithfully a misfire, see :class:`~spatialrl.envs.virl.rail.Fixes`); wrong answers keep the state
    and use one of ``verify_iter`` (2) attempts. The next call at the same point is a forced −1 whose
    text is not read: the episode ends as a failure (truncated). At a non-stop point that step returns
    the image at the *old* position with the *next* point's heading and the next point's info, as the
    reference does.

Reset options
    ``route_idx`` (int): play that route, drawing only heading and drops from the env's own RNG.
    ``stream`` ({"seed", "index", "ordered"}): play episode ``index`` of the reference evaluator's
    sequence — ``random.seed(seed)`` once, then per episode ``choice(routes)`` (or route ``index`` when
    ordered), heading and drops. The env replays the earlier episodes' draws, so any episode can be
    (re)started alone. ``absolute_action`` (bool) overrides the action space; ``start_heading`` fixes the
    heading without a draw; ``data`` switches to another dataset folder; ``split`` labels the episode.
    Without options, the route is ``choice(routes)`` from the env's RNG, which ``reset(seed=...)``
    reseeds (gymnasium semantics; the reference seeds Python's global RNG once instead).
"""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from spatialrl.envs.virl.data import VirlDataset
from spatialrl.envs.virl.pixels import REFERENCE_GRID, GridCache, GridRenderer, grid_layout, shared_cache
from spatialrl.envs.virl.prompts import action_list, expert_response, obs_act_sequence
from spatialrl.envs.virl.rail import STOP, Rail, build_rail, parse_rail_mode
from spatialrl.envs.virl.validate import load_dataset
from spatialrl.envs.virl.verify import MSG_BUDGET, REWARDS, verify

ENV_ID = "spatialrl/VIRL-v0"
RESET_OPTIONS = frozenset({"route_idx", "stream", "absolute_action", "start_heading", "data", "split"})
_TEXT_CHARS = string.printable + "".join(chr(c) for c in range(0xA0, 0x250))


class VirlEnv(gym.Env):
    """V-IRL navigation on the real SFTvsRL data or a generated city in the same format."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 2}

    def __init__(
        self,
        data: str | Path | VirlDataset,
        *,
        mode: str = "vl",
        absolute_action: bool = True,
        verify_iter: int = 2,
        drop_rate: float = 0.5,
        straight_line_length: int = 5,
        grid_size: int = REFERENCE_GRID,
        rail_mode: str = "faithful",
        intersection_in_text: bool = True,
        cache_mb: float = 1024,
        cache_dir: str | Path | None = None,
        cache: GridCache | None = None,
        seed: int | None = None,
        render_mode: str | None = None,
    ):
        if mode not in ("vl", "l"):
            raise ValueError(f"mode must be 'vl' (vision-language) or 'l' (language only), got {mode!r}")
        if verify_iter < 0:
            raise ValueError(f"verify_iter must be >= 0, got {verify_iter}")
        if straight_line_length < 1:
            raise ValueError(f"straight_line_length must be >= 1, got {straight_line_length}")
        if not isinstance(intersection_in_text, bool):
            raise ValueError(f"intersection_in_text must be true or false, got {intersection_in_text!r}")
        if mode == "l" and not intersection_in_text:
            # a text-only agent would have nothing left to tell an intersection by
            raise ValueError("intersection_in_text=false (the vision-required variant) needs mode='vl'")
        grid_layout(grid_size)
        self.vision = mode == "vl"
        self.intersection_in_text = intersection_in_text
        self.mode = mode
        self.absolute_action = bool(absolute_action)
        self.verify_iter = int(verify_iter)
        self.drop_rate = float(drop_rate)
        self.straight_line_length = int(straight_line_length)
        self.grid_size = int(grid_size)
        self.fixes = parse_rail_mode(rail_mode)
        self.render_mode = render_mode
        # Rendered grids are shared by every env of the process with the same settings (runner slots).
        self._cache = cache if cache is not None else (
            shared_cache(cache_mb, cache_dir) if cache_mb > 0 or cache_dir else None)
        self._py_random = random.Random(seed)
        self._set_dataset(data)
        if self.vision:
            self.observation_space = spaces.Box(0, 255, (self.grid_size, self.grid_size, 3), np.uint8)
        else:
            self.observation_space = spaces.Text(max_length=4096, charset=_TEXT_CHARS)
        self.action_space = spaces.Text(max_length=8192, charset=_TEXT_CHARS)
        self.rail: Rail | None = None
        self._done = True

    # ---------------------------------------------------------------------------------------- setup

    def _set_dataset(self, data: str | Path | VirlDataset) -> None:
        if isinstance(data, VirlDataset):
            self.dataset = data
        else:
            self.dataset = load_dataset(data, images=self.vision, straight_line_length=self.straight_line_length)
        self.renderer = GridRenderer(self.dataset, self.grid_size, self.fixes.grid_order, self._cache)

    def _rail(self, route_idx: int, rng: random.Random, absolute: bool, start_heading: float | None = None) -> Rail:
        return build_rail(
            self.dataset, route_idx, rng, absolute_action=absolute, drop_rate=self.drop_rate,
            straight_line_length=self.straight_line_length, fixes=self.fixes, start_heading=start_heading,
        )

    def _stream(self, stream: dict[str, Any]) -> tuple[random.Random, int]:
        """The RNG state and route of episode ``index`` of a reference evaluation sequence."""
        seed, index, ordered = int(stream["seed"]), int(stream["index"]), bool(stream.get("ordered", False))
        n = len(self.dataset.routes)
        if index < 0 or (ordered and index >= n):
            raise ValueError(f"stream index {index} out of range for {n} routes")
        rng = random.Random(seed)
        for k in range(index + 1):
            route = k if ordered else rng.choice(range(n))
            if k == index:
                return rng, route
            self._rail(route, rng, True)  # consume that episode's draws (the action space draws nothing)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------------------------ gym API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._py_random = random.Random(seed)
        opts = dict(options or {})
        unknown = set(opts) - RESET_OPTIONS
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; known: {sorted(RESET_OPTIONS)}")
        if "data" in opts and Path(opts["data"]).expanduser().resolve() != self.dataset.root.resolve():
            self._set_dataset(opts["data"])
        absolute = bool(opts.get("absolute_action", self.absolute_action))
        n = len(self.dataset.routes)
        if "stream" in opts:
            rng, route_idx = self._stream(opts["stream"])
        elif "route_idx" in opts:
            rng, route_idx = self._py_random, int(opts["route_idx"])
            if not 0 <= route_idx < n:
                raise ValueError(f"route_idx {route_idx} out of range: the dataset has {n} routes")
        else:
            rng = self._py_random
            route_idx = rng.choice(range(n))
        self.split = opts.get("split")
        self.stream = opts.get("stream")
        self.rail = self._rail(route_idx, rng, absolute, opts.get("start_heading"))
        self.step_cnt = 0
        self.remaining = self.verify_iter
        self.current_geocode = self.rail.points[0].geocode
        self.actions: list[str] = []
        self.observations: list[str] = [self.rail.points[0].oracle_observation]
        self.is_success = True
        self.n_steps = self.n_correct = 0
        self.n_retries = self.n_retry_correct = 0  # attempts after a wrong one at the same point
        self.n_destination = self.n_destination_correct = 0  # first attempts at the destination (stop)
        self.ret = 0.0
        self._done = False
        obs = self._observe()
        return obs, self._info(None, reset=True)

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._done or self.rail is None:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        text = action if isinstance(action, str) else str(action)
        seen = self._view
        point = self.rail.points[self.step_cnt]
        position = self.step_cnt
        self.remaining -= 1
        self.n_steps += 1
        if self.remaining < 0:
            return self._forced_end(seen, position)
        retry = self.remaining < self.verify_iter - 1  # an earlier attempt at this point was wrong
        self.n_retries += retry
        at_destination = point.gt_action == STOP and not retry  # the first attempt at the route's end
        self.n_destination += at_destination
        says = point.at_intersection if self.fixes.intersection_reward else "intersection" in point.observation
        verdict = verify(text, point.gt_action, says)
        terminated = False
        if verdict.reward == REWARDS["CORRECT_ACTION"]:
            self.n_correct += 1
            self.n_retry_correct += retry
            self.n_destination_correct += at_destination
            if point.gt_action == STOP:
                terminated = True
            else:
                self._move_on_rail(point.gt_action)
        self.ret += verdict.reward
        obs = self._observe()
        info = self._info(verdict.message)
        info["record"].update(self._step_fields(verdict.reward, verdict.action, verdict.observation, seen, position))
        if terminated:
            self._finish(info)
        return obs, verdict.reward, terminated, False, info

    @property
    def view(self) -> dict[str, Any]:
        """Where the agent looks now, ``{"pano_id", "geocode", "heading"}``: the observation grid is
        ``self.renderer.render(pano_id, heading)``."""
        return dict(self._view)

    def render(self) -> np.ndarray | None:
        if self.rail is None:
            return None
        if not self.vision and not self.dataset.image_path(self._view["pano_id"]).exists():
            return None
        return self.renderer.render(self._view["pano_id"], self._view["heading"])

    # ---------------------------------------------------------------------------------- internals

    def _move_on_rail(self, gt_action: str) -> None:
        assert self.rail is not None
        self.step_cnt += 1
        self.remaining = self.verify_iter
        self.current_geocode = self.rail.points[self.step_cnt].geocode
        self.actions.append(gt_action)
        self.observations.append(self.rail.points[self.step_cnt].oracle_observation)

    def _forced_end(self, seen: dict[str, Any], position: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """The call after the budget: −1 without reading the text; the episode fails."""
        assert self.rail is not None
        self.is_success = False
        reward = REWARDS["INCORRECT_ACTION"]
        self.ret += reward
        at_stop = self.rail.points[self.step_cnt].gt_action == STOP
        if not at_stop:
            self.step_cnt += 1  # the reference advances the counter but not the position or history
        obs = self._observe()
        info = self._info(MSG_BUDGET)
        info["record"].update(self._step_fields(reward, None, None, seen, position, evaluated=False))
        self._finish(info)
        return obs, reward, at_stop, True, info

    def _observe(self) -> Any:
        """Render what the agent sees now: current position, heading of the current rail point."""
        assert self.rail is not None
        point = self.rail.points[self.step_cnt]
        key = self.dataset.panos.relocate(self.current_geocode)
        assert key is not None  # rail points are pano keys
        self._view = {
            "pano_id": self.dataset.panos.pano_id(key),
            "geocode": list(self.current_geocode),
            "heading": point.heading,
        }
        if self.vision:
            # A copy: cached grids are shared and read-only, and gymnasium hands each call's data to the
            # caller to keep (≈3 ms at 2405², far below a render).
            return self.renderer.render(self._view["pano_id"], point.heading).copy()
        return point.oracle_observation

    def _info(self, verify_info: str | None, reset: bool = False) -> dict[str, Any]:
        assert self.rail is not None
        point = self.rail.points[self.step_cnt]
        oracle = point.oracle_observation
        absolute = self.rail.absolute_action
        reference = {
            "global_instruction": self.rail.global_instruction,
            "current_instruction": point.instruction,
            "instruction_idx": 0 if reset else point.instruction_idx,
            "gt_action": point.gt_action,
            "Verify Info": verify_info,
            "current_obs": oracle,
            "obs_act_seq": obs_act_sequence(self.observations, self.actions, self.vision,
                                            self.intersection_in_text),
            "is_success": self.is_success,
        }
        return {
            **reference,
            "action_space": "absolute" if absolute else "relative",
            "expert_response": expert_response(oracle, point.instruction, point.gt_action),
            "candidate_responses": [expert_response(oracle, point.instruction, a) for a in action_list(absolute)],
            "record": dict(reference),
        }

    def _step_fields(self, reward: float, action: str | None, claim: str | None, seen: dict[str, Any],
                     position: int, evaluated: bool = True) -> dict[str, Any]:
        assert self.rail is not None
        judged = self.rail.points[position]
        return {
            "action": None if action in (None, "None") else action,
            "expected_action": judged.gt_action,
            "expected_instruction": judged.instruction,
            "claimed_observation": claim,
            "reward": reward,
            "evaluated": evaluated,
            "route_idx": self.rail.route_index,
            "rail_index": position,
            "rail_len": len(self.rail),
            "view": seen,
        }

    def _finish(self, info: dict[str, Any]) -> None:
        assert self.rail is not None
        self._done = True
        success = bool(self.is_success)
        info["episode"] = {
            "success": success,
            "n_steps": self.n_steps,
            "n_correct": self.n_correct,
            "per_step_accuracy": self.n_correct / max(1, self.n_steps),
            "n_retries": self.n_retries,
            "n_retry_correct": self.n_retry_correct,
            "n_destination": self.n_destination,
            "n_destination_correct": self.n_destination_correct,
            "return": self.ret,
            "route_idx": self.rail.route_index,
            "split": self.split,
            "stream": self.stream,
            "data": str(self.dataset.root),
            "start_heading": self.rail.start_heading,
            "rail_len": len(self.rail),
            "progress": 1.0 if success else len(self.actions) / max(1, len(self.rail) - 1),
            "absolute_action": self.rail.absolute_action,
            "mode": self.mode,
            "rail_mode": self.fixes.name,
            "grid_size": self.grid_size,
            "intersection_in_text": self.intersection_in_text,
        }


def register() -> None:
    """Register ``spatialrl/VIRL-v0`` (idempotent). The 300-step limit is the reference's."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="spatialrl.envs.virl.env:VirlEnv", max_episode_steps=300)


register()
