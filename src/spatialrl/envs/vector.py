"""Gymnasium vector envs meeting the rollout core: batched infos and the slot-by-slot adapter.

A task suite that can batch declares ``TaskSuite.make_vector_env(options, n)`` (see
:mod:`spatialrl.envs.registry`): a Gymnasium ``VectorEnv`` of ``n`` envs with the same semantics as ``n``
``make_env(options)`` envs, or ``None`` when it should not batch for these options (e.g. the user turned
it off). The rollout core (:mod:`spatialrl.rollout.core`) then drives that one vector env through
:class:`VectorSlots`, which needs this much of it:

* ``autoreset_mode`` ``Disabled``: the core starts every episode itself;
* ``reset(seed=[one seed or None per env], options={"reset_mask": mask, "per_env": [options or None per
  env]})``: reset only the masked envs, each with its own seed and reset options (gymnasium's
  ``reset_mask``; ``per_env`` is the extension that carries each slot's ``EpisodeSpec.reset_options``);
* ``step(actions)`` where an action ``None`` leaves that env untouched (the extension for slots that do
  not act this turn: idle, finished, errored or not chosen by PPO);
* infos as gymnasium's dicts of arrays with ``_key`` masks (:func:`batch_infos` builds them,
  :func:`unbatch_info` takes env ``i``'s own dict back out);
* ``copy=False``-style buffers are fine: the adapter copies every array it hands a slot out of the
  batch (the env may overwrite its buffers on the next call, and a slot's prompter keeps its frames);
* optionally ``episode_info_keys``: info keys whose value is the reset's for the whole episode (TVR's
  ``target_image``). The adapter copies them once at the reset and puts that same object into every step
  info of the slot, as a single env does; the vector env may leave them out of step infos.

Every slot then sees exactly what ``make_env(options)`` would have returned — observation, reward,
flags and info — while the envs of a turn render together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def batch_infos(infos: Sequence[tuple[int, dict[str, Any]]], n: int) -> dict[str, Any]:
    """``VectorEnv._add_info`` applied to every ``(env index, info)`` in order, computed key by key: an
    array per key typed by its first value (Python/NumPy number → that dtype, ndarray → stacked, else
    object; ``final_obs`` always object), nested dicts recursively, a ``_key`` bool mask per key."""
    columns: dict[str, list[tuple[int, Any]]] = {}
    for i, info in infos:
        for key, value in info.items():
            columns.setdefault(key, []).append((i, value))
    out: dict[str, Any] = {}
    for key, pairs in columns.items():
        first = pairs[0][1]
        if key == "final_obs":
            array: Any = np.full(n, None, dtype=object)
        elif isinstance(first, dict):
            array = batch_infos(pairs, n)
        elif type(first) in (int, float, bool) or isinstance(first, np.number):
            array = np.zeros(n, dtype=type(first))
        elif isinstance(first, np.ndarray):
            array = np.zeros((n, *first.shape), dtype=first.dtype)
        else:
            array = np.full(n, None, dtype=object)
        if not isinstance(array, dict):
            for i, value in pairs:
                array[i] = value
        mask = np.zeros(n, np.bool_)
        mask[[i for i, _ in pairs]] = True
        out[key], out[f"_{key}"] = array, mask
    return out


def unbatch_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Env ``i``'s own info dict from gymnasium's batched infos (the inverse of ``VectorEnv._add_info``):
    keys whose ``_key`` mask is set for ``i``, nested dicts likewise, NumPy scalars as Python numbers.
    Arrays come back as views into the batch."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[i]:
            continue
        if isinstance(value, dict):
            out[key] = unbatch_info(value, i)
        else:
            item = value[i]
            out[key] = item.item() if isinstance(item, np.generic) else item
    return out


def _own(value: Any) -> Any:
    """``value`` with every ndarray in it (nested dicts walked) replaced by a read-only copy. Other values
    are the env's own objects already (``unbatch_info`` takes them out of object arrays, not views)."""
    if isinstance(value, np.ndarray):
        copy = np.array(value, copy=True)
        copy.setflags(write=False)
        return copy
    if isinstance(value, dict):
        return {k: _own(v) for k, v in value.items()}
    return value


class VectorSlots:
    """One vector env stepped slot by slot: ``reset``/``step`` take ``(env index, ...)`` jobs, run them in
    one batched call, and return per job what a single env would (``(obs, info)`` or the step 5-tuple,
    with Python ``float``/``bool`` reward and flags). Arrays handed out are the slot's own read-only
    copies: the batch's buffers may be overwritten by the next call, and a prompter keeps its frames."""

    def __init__(self, venv: Any):
        mode = getattr(venv, "autoreset_mode", None) or venv.metadata.get("autoreset_mode")
        if getattr(mode, "value", mode) != "Disabled":
            raise ValueError(f"{type(venv).__name__}: the rollout core needs autoreset_mode='Disabled', got {mode!r}")
        self.venv, self.num_envs = venv, int(venv.num_envs)
        self.episode_keys = tuple(getattr(venv, "episode_info_keys", ()))
        self._kept: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]  # each slot's episode_keys values
        self._skip = {*self.episode_keys, *(f"_{k}" for k in self.episode_keys)}

    def _check(self, indices: list[int]) -> None:
        if len(set(indices)) != len(indices) or not all(0 <= i < self.num_envs for i in indices):
            raise ValueError(f"slot indices must be distinct and in 0..{self.num_envs - 1}, got {indices}")

    def reset(self, jobs: Sequence[tuple[int, int | None, dict[str, Any]]]) -> list[tuple[Any, dict[str, Any]]]:
        """Start an episode in each ``(env index, seed, reset options)``; returns ``(obs, info)`` per job."""
        if not jobs:
            return []
        self._check([i for i, _, _ in jobs])
        mask = np.zeros(self.num_envs, np.bool_)
        seeds: list[int | None] = [None] * self.num_envs
        per_env: list[dict[str, Any] | None] = [None] * self.num_envs
        for i, seed, options in jobs:
            mask[i], seeds[i], per_env[i] = True, seed, dict(options)
        obs, infos = self.venv.reset(seed=seeds, options={"reset_mask": mask, "per_env": per_env})
        out = []
        for i, _, _ in jobs:
            info = _own(unbatch_info(infos, i))
            self._kept[i] = {k: info[k] for k in self.episode_keys if k in info}
            out.append((_own(obs[i]), info))
        return out

    def step(self, jobs: Sequence[tuple[int, Any]]) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
        """Step each ``(env index, action)``; the other envs are left as they are. The step 5-tuple per job."""
        if not jobs:
            return []
        self._check([i for i, _ in jobs])
        actions: list[Any] = [None] * self.num_envs
        for i, action in jobs:
            actions[i] = action
        obs, rewards, terminated, truncated, infos = self.venv.step(actions)
        if self._skip:
            infos = {k: v for k, v in infos.items() if k not in self._skip}
        out = []
        for i, _ in jobs:
            info = unbatch_info(infos, i)
            out.append((_own(obs[i]), float(rewards[i]), bool(terminated[i]), bool(truncated[i]),
                        {**self._kept[i], **_own(info)}))
        return out

    def close(self) -> None:
        self.venv.close()


class SlotEnv:
    """Env ``index`` of a :class:`VectorSlots` with the single-env ``reset``/``step`` calls (each one a
    batched call of one env): what a core slot holds as ``env`` on the vector path, so code that steps
    one slot (e.g. the core's ``replay``) works unchanged. ``close`` does nothing: the pool closes the
    vector env."""

    def __init__(self, slots: VectorSlots, index: int):
        self.slots, self.index = slots, index

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return self.slots.reset([(self.index, seed, dict(options or {}))])[0]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.slots.step([(self.index, action)])[0]

    def close(self) -> None:
        pass
