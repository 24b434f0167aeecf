"""``TVRVectorEnv``: N TVR episodes in one object, every frame of a step rendered in one batch.

Gymnasium's ``VectorEnv`` API (1.x): ``reset(seed=, options=)`` and ``step(actions)`` take and return
batches; observations are one ``(N, H, W, 3)`` uint8 array, rewards ``(N,)`` float64, ``terminated`` and
``truncated`` ``(N,)`` bool arrays, and infos a dict of arrays with a ``_key`` mask per key (nested dicts
such as ``record`` and ``episode`` nest the same way), exactly what ``SyncVectorEnv`` makes of N
``TVREnv``\\s. Autoreset follows ``autoreset_mode`` as documented in gymnasium 1.x:

* ``NEXT_STEP`` (default): the step after an episode ends resets that env (its action is ignored;
  reward 0, not terminated/truncated, the reset observation and info);
* ``SAME_STEP``: the env resets in the step that ended it; ``infos["final_obs"]`` (object array) and
  ``infos["final_info"]`` hold the last observation and info;
* ``DISABLED``: reset envs yourself with ``reset(options={"reset_mask": mask})``. Here (an extension of
  the API, for runners whose slots start and end episodes at different times) an action ``None`` leaves
  that env as it is: no step, its last observation kept, reward 0, not terminated/truncated, no info.

Semantics are ``TVREnv``'s, from the same code (``episode.py``): task pool and selection, lattice, move
rules, budgets, rewards, success, oracle, records and summaries. Env ``i`` draws its tasks with its own
RNG seeded like a single env's (``reset(seed=s)`` seeds env ``i`` with ``s + i``, as ``SyncVectorEnv``), so
N vector episodes equal N single envs for the same seeds and actions, frames included (tested).

Reset options: the single env's (``task``, ``task_id``: every reset env gets them), per env
``task_ids`` / ``tasks`` (sequences of N entries, None = draw from the pool), ``per_env`` (N option dicts
or None, e.g. each slot's ``EpisodeSpec.reset_options``) and ``reset_mask``. ``unbatch_info(infos, i)``
turns the batched infos back into env ``i``'s own info dict (what ``TVREnv`` returns), for prompters.

Rendering: each step collects the frames it needs (current views, and at resets the start and target
views) and renders the cache misses in one ``Renderer.render_batch`` call over all their scenes, straight
into the observation buffer (``RenderService.render_into``; see ``docs/rendering.md``). The frame cache is
the process-wide one of ``TVREnv`` (``cache_mb``; 0 = off). ``readback`` picks how the rendered chunks
come back from the GL (``Renderer.render_batch``): ``"sync"``, ``"pbo"`` (asynchronous pixel-buffer
readback overlapping the next chunk's draws), ``"pbo_rgb"`` (the same, packed RGB by the GL) or ``"auto"``
(default: ``"pbo_rgb"`` on a GPU, ``"sync"`` on llvmpipe); same frames either way.

Buffers: with ``copy=True`` (default) every call returns arrays the env never writes again — a new
observation array rendered into directly, and a target-image array replaced (copy on write) only when
some env reset — marked read-only like ``TVREnv``'s frames, so no frame is copied just to hand it out
(a 640x360 copy of 64 frames costs more than 10% of a step). ``copy=False`` returns the env's own
buffers, overwritten in place by the next call (``use_observation_buffer`` and ``use_info_buffer`` make
the observation and target buffers ones the caller gives, e.g. shared memory).
``step_target_image=False`` (Disabled autoreset only) leaves ``target_image`` out of step infos: it is
the reset's for the whole episode, and building the masked (N, H, W, 3) array at every step is what the
rollout core's adapter (which keeps each slot's target from its reset, ``episode_info_keys``) would
throw away.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.episode import Episode, RewardConfig, TaskPool, check_env_args
from spatialrl.envs.tvr.scenes import render_service
from spatialrl.envs.vector import batch_infos, unbatch_info  # noqa: F401  (unbatch_info re-exported)

Request = tuple[str, Any, "str | None", np.ndarray]


class TVRVectorEnv(VectorEnv):
    __doc__ = __doc__

    def __init__(self, num_envs: int, bench: str | Path | None = None, split: str = "eval",
                 tasks: list[dict[str, Any]] | None = None, width: int = 640, height: int = 360,
                 badges: bool = True, cache_mb: float = 512.0, max_steps_single: int = 30,
                 max_steps_multi: int = 40, distance: str = "euclidean", reward: RewardConfig | None = None,
                 expert_tie_break: str = oracle.DEFAULT_TIE_BREAK,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, copy: bool = True,
                 step_target_image: bool = True, readback: str = "auto"):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs <= 0:
            raise ValueError(f"TVRVectorEnv num_envs must be a positive integer, got {num_envs!r}")
        check_env_args("TVRVectorEnv", width=width, height=height, max_steps_single=max_steps_single,
                       max_steps_multi=max_steps_multi, distance=distance, expert_tie_break=expert_tie_break)
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(f"TVRVectorEnv autoreset_mode must be one of {[m.value for m in AutoresetMode]}, "
                             f"got {autoreset_mode!r}") from None
        from spatialrl.render.layers import check_readback  # here: importing the env stays free of GL and cv2

        self.readback = check_readback(readback, owner="TVRVectorEnv")
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        self.num_envs = num_envs
        self._tasks = TaskPool(bench, split, tasks, owner="TVRVectorEnv")
        self.bench, self.split = self._tasks.bench, split
        self.width, self.height, self.badges = width, height, badges
        self.budgets = {"single": max_steps_single, "multi": max_steps_multi}
        self.distance, self.reward_cfg, self.expert_tie_break = distance, reward or RewardConfig(), expert_tie_break
        self.copy = copy
        if not step_target_image and self.autoreset_mode != AutoresetMode.DISABLED:
            raise ValueError("TVRVectorEnv step_target_image=False needs autoreset_mode='Disabled' (other modes "
                             "reset inside step, and a reset's info carries the target image)")
        self.step_target_image = step_target_image
        # Info keys that stay the same object for a whole episode (the rollout core's adapter keeps them
        # from the reset and puts them into every step info of that slot; see spatialrl.envs.vector).
        self.episode_info_keys = ("target_image",)
        self.renderer = render_service(width, height, cache_mb)
        self.single_observation_space = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.single_action_space = gym.spaces.Text(max_length=4096, min_length=0, charset=string.printable)
        self.episodes: list[Episode | None] = [None] * num_envs
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._obs = np.zeros((num_envs, height, width, 3), np.uint8)
        self._targets = np.zeros((num_envs, height, width, 3), np.uint8)
        self._autoreset = np.zeros(num_envs, np.bool_)
        self._labels = ("CURRENT", "TARGET") if badges else (None, None)

    # -- gym VectorEnv API ----------------------------------------------------------------------------
    @functools.cached_property
    def observation_space(self) -> gym.spaces.Box:
        """The batched space, built on first use: its bound arrays are two more (N, H, W, 3) arrays, and
        gymnasium checks them element by element (about a second for 64 envs at 640x360), which a
        runner that makes a vector env per run should not pay for a space it never reads."""
        return batch_space(self.single_observation_space, self.num_envs)

    @functools.cached_property
    def action_space(self) -> gym.Space:
        return batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        n = self.num_envs
        seeds = [None] * n if seed is None else [seed + i for i in range(n)] if isinstance(seed, int) else list(seed)
        if len(seeds) != n:
            raise ValueError(f"seed must be None, an int or {n} seeds (one per env), got {len(seeds)}")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is None:
            mask = np.ones(n, np.bool_)
        elif not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (n,) and mask.any()):
            raise ValueError(f"options['reset_mask'] must be a bool numpy array of shape ({n},) with a True entry")
        per_env = self._per_env_options(options)
        self._fresh_obs(keep=not mask.all())
        requests: list[Request] = []
        infos: list[tuple[int, dict[str, Any]]] = []
        for i in np.flatnonzero(mask):
            infos.append((int(i), self._reset_one(int(i), seeds[i], per_env[i], requests)))
        self._autoreset[mask] = False
        self.renderer.render_into(requests, self.readback)
        return self._out_obs(), self._merge(infos, mask)

    def step(self, actions: Sequence[str]):
        actions = list(actions)
        n = self.num_envs
        if len(actions) != n:
            raise ValueError(f"TVRVectorEnv.step needs {n} actions (one per env), got {len(actions)}")
        rewards = np.zeros(n, np.float64)
        terminated = np.zeros(n, np.bool_)
        truncated = np.zeros(n, np.bool_)
        skip = np.array([a is None for a in actions], np.bool_)
        if skip.any() and self.autoreset_mode != AutoresetMode.DISABLED:
            raise ValueError("TVRVectorEnv.step: a None action (skip this env) needs autoreset_mode='Disabled'")
        self._fresh_obs(keep=bool(skip.any()))
        requests: list[Request] = []
        infos: list[tuple[int, dict[str, Any]]] = []
        finals: list[tuple[int, np.ndarray, dict[str, Any]]] = []
        current = self._labels[0]
        for i, action in enumerate(actions):
            if action is None:
                continue
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset[i]:
                infos.append((i, self._reset_one(i, None, {}, requests)))
                continue
            ep = self.episodes[i]
            if ep is None:
                raise RuntimeError(f"TVRVectorEnv.step: env {i} was never reset; call reset() first")
            rewards[i], terminated[i], truncated[i], record = ep.step(action)
            info = ep.info(None, record)
            if self.autoreset_mode == AutoresetMode.SAME_STEP and ep.done:
                final_obs = np.empty_like(self._obs[i])
                requests.append((ep.scene_id, ep.pose, current, final_obs))
                finals.append((i, final_obs, {"target_image": self._targets[i].copy(), **info}))
                info = self._reset_one(i, None, {}, requests)
            else:
                requests.append((ep.scene_id, ep.pose, current, self._obs[i]))
            infos.append((i, info))
        self._autoreset = terminated | truncated
        self.renderer.render_into(requests, self.readback)
        return (self._out_obs(), rewards, terminated, truncated,
                self._merge(infos, ~skip, finals, target=self.step_target_image))

    def close_extras(self, **kwargs: Any) -> None:
        self.episodes = [None] * self.num_envs

    def use_observation_buffer(self, buffer: np.ndarray) -> bool:
        """Render observations straight into ``buffer`` (``(N, H, W, 3)`` uint8, C-contiguous) from now on,
        e.g. a ``ShardedVectorEnv`` worker's rows of the shared observation array, so no frame is copied
        after the GL wrote it: the current frames are copied in once, and every call returns ``buffer``,
        overwritten in place. Only with ``copy=False`` (``copy=True`` hands out arrays it never writes
        again); returns whether the env took the buffer."""
        if self.copy:
            return False
        self._obs = self._take_buffer(self._obs, buffer, "use_observation_buffer")
        return True

    def use_info_buffer(self, key: str, buffer: np.ndarray) -> bool:
        """``use_observation_buffer`` for the info key ``target_image`` (the target views, same shape): targets
        are rendered into ``buffer``, and infos hold ``buffer`` itself whenever every env contributed.
        Only with ``copy=False``; returns whether the env took the buffer (False for any other key)."""
        if self.copy or key != "target_image":
            return False
        self._targets = self._take_buffer(self._targets, buffer, "use_info_buffer")
        return True

    # -- helpers --------------------------------------------------------------------------------------
    def _per_env_options(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        n = self.num_envs
        shared = {k: v for k, v in options.items() if k not in ("task_ids", "tasks", "per_env")}
        per_env = [dict(shared) for _ in range(n)]
        if "per_env" in options:
            dicts = list(options["per_env"])
            if len(dicts) != n:
                raise ValueError(f"reset options['per_env'] needs {n} entries (one per env), got {len(dicts)}")
            for opts, extra in zip(per_env, dicts, strict=True):
                opts.update(extra or {})
        for key, single in (("task_ids", "task_id"), ("tasks", "task")):
            if key in options:
                values = list(options[key])
                if len(values) != n:
                    raise ValueError(f"reset options[{key!r}] needs {n} entries (one per env), got {len(values)}")
                for opts, v in zip(per_env, values, strict=True):
                    if v is not None:
                        opts[single] = v
        return per_env

    def _reset_one(self, i: int, seed: int | None, options: dict[str, Any], requests: list[Request]) -> dict[str, Any]:
        """Start a new episode in env ``i`` (seeded like ``gym.Env.reset``); queue its target and start frames."""
        if seed is not None:
            self._rngs[i] = seeding.np_random(seed)[0]
        elif self._rngs[i] is None:
            self._rngs[i] = seeding.np_random()[0]
        task = self._tasks.select(options, self._rngs[i])
        self._tasks.check_scene(task["scene"])
        ep = self.episodes[i] = Episode(task, max_steps=self.budgets[task["dataset"]], distance=self.distance,
                                        reward=self.reward_cfg, tie_break=self.expert_tie_break)
        current, target = self._labels
        if self.copy and not self._targets.flags.writeable:  # copy on write: returned arrays never change
            self._targets = self._targets.copy()
        requests.append((ep.scene_id, ep.target, target, self._targets[i]))
        requests.append((ep.scene_id, ep.start, current, self._obs[i]))
        return ep.info(None, None)

    def _fresh_obs(self, keep: bool) -> None:
        """With ``copy``: a new observation buffer for this call (``keep``: with the last frames in it)."""
        if self.copy:
            self._obs = self._obs.copy() if keep else np.empty_like(self._obs)

    @staticmethod
    def _take_buffer(current: np.ndarray, buffer: np.ndarray, owner: str) -> np.ndarray:
        if not (isinstance(buffer, np.ndarray) and buffer.shape == current.shape and buffer.dtype == current.dtype
                and buffer.flags.c_contiguous and buffer.flags.writeable):
            raise ValueError(f"TVRVectorEnv.{owner} needs a writeable C-contiguous uint8 array of shape {current.shape}, "
                             f"got {getattr(buffer, 'dtype', type(buffer).__name__)}{getattr(buffer, 'shape', '')}")
        buffer[...] = current
        return buffer

    def _out_obs(self) -> np.ndarray:
        if self.copy:
            self._obs.setflags(write=False)
        return self._obs

    def _merge(self, infos: list[tuple[int, dict[str, Any]]], contributed: np.ndarray,
               finals: Sequence[tuple[int, np.ndarray, dict[str, Any]]] = (), target: bool = True) -> dict[str, Any]:
        """Gymnasium's dict-of-arrays infos (what ``VectorEnv._add_info`` builds env by env, built here key
        by key: same arrays, dtypes and masks, a fraction of the Python calls); ``target_image`` comes from
        the target buffer (left out when not ``target``: ``step_target_image=False``)."""
        merged = batch_infos(infos, self.num_envs)
        if finals:
            merged.update(batch_infos([(i, {"final_obs": obs, "final_info": info}) for i, obs, info in finals],
                                      self.num_envs))
        if not target:
            return merged
        if contributed.all():
            if self.copy:
                self._targets.setflags(write=False)
            merged["target_image"] = self._targets
        else:
            targets = np.zeros(self._targets.shape, self._targets.dtype)  # calloc: pages of skipped envs stay untouched
            for i in np.flatnonzero(contributed):
                targets[i] = self._targets[i]
            merged["target_image"] = targets
        merged["_target_image"] = contributed.copy()
        return merged

