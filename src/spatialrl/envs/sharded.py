"""``ShardedVectorEnv``: one Gymnasium ``VectorEnv`` of N envs over K worker processes, each owning a shard.

Why: a batched env such as ``TVRVectorEnv`` renders all frames of a step in one GL call, but its host side
(readback copy, per-env Python) runs on one core, and on a GPU that core is the limit (one H100, 640x360,
N = 1,024: 3,593 steps/s at ~0.28 host ms per step, 15 of 16 cores idle). K processes, each with its own
shard (and so its own EGL context on the same GPU), spread that host work over K cores.

How it works:

* Worker ``j`` builds ``make_shard(sizes[j])`` (a picklable callable returning a ``VectorEnv`` of that
  many envs, e.g. ``functools.partial(TVRVectorEnv, bench=...)``; gymnasium's ``CloudpickleWrapper``
  carries it, so lambdas work too) and serves ``reset``/``step`` over a pipe. The parent sends a call to
  every shard first and collects afterwards, so the shards run in parallel.
* Observations live in one shared array of shape ``(N, *single_obs_shape)`` (so the single observation
  space must be a ``Box``); shard ``j`` owns rows ``offsets[j] : offsets[j] + sizes[j]``. A shard that
  offers ``use_observation_buffer(rows) -> bool`` (``TVRVectorEnv`` made with ``copy=False``) renders
  straight into its rows; otherwise the worker copies the shard's observations in after each call.
* Rewards, flags and infos are small and come through the pipes: the parent concatenates them and merges
  the shards' batched infos (gymnasium's dicts of arrays with ``_key`` masks, nested dicts alike) into one
  dict of N entries equal to what one vector env of N envs returns (:func:`merge_infos`).
* Except large per-env info arrays, ``shared_info_keys`` (default: the shards' ``episode_info_keys``,
  TVR's ``target_image``, ``(n, H, W, 3)`` at every reset and, with autoreset, every step): pickled
  through a pipe, one 32-env shard's 640x360 targets (22 MB) took ~115 ms on the 2-core VM, longer than
  the step. The first time such a key comes, the parent makes a shared ``(N, ...)`` array for it and the
  workers map their rows with the next call; from then on a shard that offers ``use_info_buffer(key,
  rows) -> bool`` (``TVRVectorEnv`` with ``copy=False``) renders into them and the info holds them, and
  other shards' arrays are copied in (skipped when it is the same read-only array as last time, as a
  ``copy=True`` ``TVRVectorEnv``'s targets between resets). When a shard's array is not its rows (a
  masked reset), only the rows of envs whose ``_key`` mask is set go through the pipe: the others are
  taken to be zeros, as ``batch_infos`` and ``TVRVectorEnv`` leave them. Nested dicts (``final_info``)
  go through the pipe as they are.
* Semantics are the shards': env ``i`` is env ``i - offsets[j]`` of shard ``j``. ``reset(seed=s)`` gives
  shard ``j`` the seed ``s + offsets[j]`` (env ``i`` seeded ``s + i``, as one vector env or
  ``SyncVectorEnv`` does); a list of per-env seeds and the per-env reset options (``per_env_options``,
  default :data:`PER_ENV_OPTIONS`: sequences of N entries) are sliced per shard, other options go to every
  shard as they are. A shard whose ``reset_mask`` slice has no True entry is not called (``TVRVectorEnv``
  rejects such a mask): its envs stay as they are and are absent from the infos, as masked-out envs.
* Buffers: ``copy=True`` (default) returns read-only copies of the shared arrays (observations, shared
  info keys) that are never written again; a copy is N frames through one core of the parent, so
  consumers that copy what they keep anyway (the rollout core) use ``copy=False``: the shared arrays
  themselves, overwritten by later calls.

Shared memory is a file in ``/dev/shm`` (the temp folder when that has too little room, as
``multiprocessing``'s own heap does), mapped by the parent and every worker and unlinked as soon as all
have mapped it, so nothing is left behind even when a process is killed; the memory goes with the last
mapping (arrays handed out with ``copy=False`` stay valid after ``close``). Gymnasium's
``create_shared_memory`` does not fit: its ``multiprocessing.Array`` can only be handed to a process when
it starts, and the observation space is known only once a worker has built its shard (building one in the
parent would open a GL context there).

Errors: an exception in a worker is raised in the parent as :class:`ShardError`, naming the shard, its
envs and the call, with the worker's traceback (the original exception as ``__cause__`` where it
unpickles); the worker stays up for later calls. A worker that dies is a ``ShardError`` too and closes the
env. Workers ignore SIGINT and SIGTERM, so Ctrl-C and a group SIGTERM (``timeout``, Slurm: a trainer
pauses at the end of its update) go to the parent, whose ``close`` (also on leaving a ``with`` block
and, as a last resort, from ``__del__``) ends them. Start methods ``spawn`` (default) and ``forkserver``
only: the parent may hold GL contexts and threads that a forked child must not inherit.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import pickle
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import CloudpickleWrapper, batch_space, clear_mpi_env_vars

from spatialrl.envs.shard_worker import InShared, Rows, map_shared, shared_file, sigint_ignored, worker_main

# Reset options holding one entry per env, sliced per shard: gymnasium's reset_mask, the rollout core's
# per_env (spatialrl.envs.vector) and TVR's task_ids / tasks. Every other option goes to all shards.
PER_ENV_OPTIONS = ("reset_mask", "per_env", "task_ids", "tasks")
CONTEXTS = ("spawn", "forkserver")
CLOSE_TIMEOUT_S = 10.0  # how long close() waits for a worker to close its shard before terminating it


def even_sizes(n: int, k: int) -> list[int]:
    """``n`` envs over ``min(k, n)`` shards of near-equal size (the first ``n % k`` one env larger)."""
    k = max(1, min(k, n))
    return [n // k + (j < n % k) for j in range(k)]


class ShardError(RuntimeError):
    """A shard's worker failed (or died) in a call. ``shard``: its index; ``envs``: its env indices;
    ``command``: the call; ``worker_traceback``: the worker's traceback text ('' when it died)."""

    def __init__(self, message: str, shard: int, envs: range, command: str, worker_traceback: str = ""):
        super().__init__(message)
        self.shard, self.envs, self.command, self.worker_traceback = shard, envs, command, worker_traceback


# -- infos ----------------------------------------------------------------------------------------------
def merge_infos(parts: Sequence[tuple[dict[str, Any] | None, int]]) -> dict[str, Any]:
    """One batched info dict of ``sum(n)`` envs from consecutive shards' ``(batched infos or None, n)``:
    each key's arrays concatenated along axis 0 (nested dicts recursively), typed like the first shard
    that has the key (as ``batch_infos`` types a key by its first value); a shard without the key (or
    None: not called) fills zeros, or None in object arrays, with its ``_key`` mask False."""
    n = sum(size for _, size in parts)
    keys: dict[str, None] = {}  # ordered union: the order in which one env of N envs would meet them
    for info, _ in parts:
        for key in info or {}:
            if not (key.startswith("_") and key[1:] in info):  # `_key` is the mask of `key`
                keys.setdefault(key)
    out: dict[str, Any] = {}
    for key in keys:
        first = next(info[key] for info, _ in parts if info and key in info)
        mask = np.zeros(n, np.bool_)
        if isinstance(first, dict):
            array: Any = merge_infos([(info.get(key) if info else None, size) for info, size in parts])
        elif isinstance(first, np.ndarray):
            array = (np.full(n, None, dtype=object) if first.dtype == object and first.ndim == 1
                     else np.zeros((n, *first.shape[1:]), first.dtype))
        else:
            raise TypeError(f"merge_infos: info key {key!r} holds a {type(first).__name__}, not a batched array or dict")
        start = 0
        for info, size in parts:
            if info and key in info:
                if not isinstance(array, dict):
                    array[start:start + size] = info[key]
                mask[start:start + size] = info.get(f"_{key}", True)
            start += size
        out[key], out[f"_{key}"] = array, mask
    return out


# -- the parent ------------------------------------------------------------------------------------------
class ShardedVectorEnv(VectorEnv):
    __doc__ = __doc__

    def __init__(self, make_shard: Callable[[int], VectorEnv], sizes: Sequence[int], context: str = "spawn",
                 copy: bool = True, per_env_options: Sequence[str] = PER_ENV_OPTIONS,
                 shared_info_keys: Sequence[str] | None = None):
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        self._obs: np.ndarray | None = None
        self._info_arrays: dict[str, np.ndarray] = {}  # shared info arrays, by key
        self._to_attach: list[tuple[str, str, tuple[int, ...], np.dtype]] = []  # made, not yet mapped by workers
        sizes = list(sizes)
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int | np.integer) or s <= 0 for s in sizes):
            raise ValueError(f"ShardedVectorEnv sizes must be a non-empty sequence of positive integers, got {sizes!r}")
        if context not in CONTEXTS:
            raise ValueError(f"ShardedVectorEnv context must be one of {', '.join(map(repr, CONTEXTS))}, got "
                             f"{context!r} ('fork' would copy the parent's GL contexts and threads)")
        if not callable(make_shard):
            raise TypeError(f"ShardedVectorEnv make_shard must be a callable (n -> VectorEnv), got {make_shard!r}")
        self.sizes = [int(s) for s in sizes]
        self.offsets = [int(o) for o in np.cumsum([0, *self.sizes[:-1]])]
        self.num_envs = sum(self.sizes)
        self.copy = copy
        self.per_env_options = tuple(per_env_options)
        ctx = mp.get_context(context)
        wrapped = CloudpickleWrapper(make_shard)
        try:
            with clear_mpi_env_vars(), sigint_ignored():
                for j, size in enumerate(self.sizes):
                    parent_conn, child_conn = ctx.Pipe()
                    args = (j, wrapped, size, child_conn, None if shared_info_keys is None else tuple(shared_info_keys))
                    proc = ctx.Process(target=worker_main, args=args, daemon=True, name=f"ShardedVectorEnv-shard-{j}")
                    try:
                        proc.start()
                    finally:
                        child_conn.close()  # the parent's copy: with it closed, a dead worker is EOF here
                    self._conns.append(parent_conn)
                    self._procs.append(proc)
            self._adopt(self._gather(range(len(self.sizes)), "make_shard"), shared_info_keys)
            self._attach()
        except BaseException:
            self.close()
            raise

    # -- gym VectorEnv API ----------------------------------------------------------------------------
    @functools.cached_property
    def observation_space(self) -> gym.Space:
        """Built on first use, like ``TVRVectorEnv``'s: batching a Box of N frames checks every bound."""
        return batch_space(self.single_observation_space, self.num_envs)

    @functools.cached_property
    def action_space(self) -> gym.Space:
        return batch_space(self.single_action_space, self.num_envs)

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids, shard by shard (e.g. to count their CPU time)."""
        return [p.pid for p in self._procs]

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        self._check_open()
        seeds = self._split_seeds(seed)
        options = dict(options or {})
        shard_options = self._split_options(options)
        shards = list(range(len(self.sizes)))
        mask = options.get("reset_mask")
        if mask is not None:  # skip shards with nothing to reset, unless none has (then the shards say what's wrong)
            hit = [bool(np.asarray(mask)[o:o + n].any()) for o, n in zip(self.offsets, self.sizes, strict=True)]
            shards = [j for j in shards if hit[j]] or shards
        got = self._call({j: ("reset", (seeds[j], shard_options[j])) for j in shards})
        return self._out_obs(), self._merge(got)

    def step(self, actions: Any):
        self._check_open()
        batch = actions if isinstance(actions, np.ndarray) else list(actions)
        if len(batch) != self.num_envs:
            raise ValueError(f"ShardedVectorEnv.step needs {self.num_envs} actions (one per env), got {len(batch)}")
        got = self._call({j: ("step", batch[o:o + n]) for j, (o, n) in enumerate(zip(self.offsets, self.sizes,
                                                                                         strict=True))})
        parts = [got[j] for j in range(len(self.sizes))]
        rewards, terminated, truncated = (np.concatenate([p[k] for p in parts]) for k in range(3))
        return self._out_obs(), rewards, terminated, truncated, self._merge({j: p[3] for j, p in enumerate(parts)})

    def close_extras(self, timeout: float = CLOSE_TIMEOUT_S, **kwargs: Any) -> None:
        """Ask every worker to close its shard, drain replies it may still be sending, and terminate the
        ones that have not exited after ``timeout`` seconds."""
        conns, procs = getattr(self, "_conns", []), getattr(self, "_procs", [])
        self._conns, self._procs, self._obs = [], [], None  # arrays handed out keep the mapping alive
        self._info_arrays = {}
        for _, path, _, _ in getattr(self, "_to_attach", []):
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._to_attach = []
        for conn in conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("close", None, []))
        deadline = time.monotonic() + timeout
        for conn, proc in zip(conns, procs, strict=True):
            while proc.is_alive() and time.monotonic() < deadline:
                try:
                    if conn.poll(0.05):
                        conn.recv()
                except (EOFError, OSError):
                    proc.join(0.05)
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
                if proc.is_alive():
                    proc.kill()
            proc.join()
            conn.close()

    def __enter__(self) -> ShardedVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            with contextlib.suppress(Exception):
                self.close(timeout=1.0)

    # -- helpers --------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("ShardedVectorEnv is closed")

    def _envs(self, j: int) -> range:
        return range(self.offsets[j], self.offsets[j] + self.sizes[j])

    def _call(self, messages: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        """Send every shard its message (with the shared info arrays made since the last call: every worker
        maps them, called this time or not, and then their files go), then collect the replies; the
        shards work in parallel."""
        attach, self._to_attach = self._to_attach, []
        if attach:
            messages = {j: messages.get(j, ("noop", None)) for j in range(len(self.sizes))}
        sent, failed = [], []
        try:
            for j, (command, data) in messages.items():
                try:
                    self._conns[j].send((command, data, attach))
                    sent.append(j)
                except (OSError, ValueError):  # a dead worker's pipe
                    failed.append(j)
            command = next(c for c, _ in messages.values() if c != "noop")
            got = self._gather(sent, command, failed)
        finally:
            for _, path, _, _ in attach:
                os.unlink(path)
        return {j: result for j, result in got.items() if messages[j][0] != "noop"} if isinstance(got, dict) else got

    def _gather(self, shards: Sequence[int], command: str, dead: Sequence[int] = ()) -> Any:
        """The replies of ``shards`` (a dict by shard index; a list for ``make_shard`` and ``attach``),
        all read before raising the first failure, so every pipe stays in step with its worker."""
        results: dict[int, Any] = {}
        errors: list[ShardError] = [self._died(j, command) for j in dead]
        for j in shards:
            try:
                status, payload = self._conns[j].recv()
            except (EOFError, OSError):
                errors.append(self._died(j, command))
                continue
            if status == "ok":
                results[j] = payload
                continue
            name, message, trace, blob = payload
            cause = None
            with contextlib.suppress(Exception):
                cause = pickle.loads(blob) if blob is not None else None
            err = ShardError(f"ShardedVectorEnv shard {j} (envs {self._envs(j).start}..{self._envs(j).stop - 1}) "
                             f"failed in {command}: {name}: {message}\n--- worker traceback ---\n{trace}",
                             j, self._envs(j), command, trace)
            err.__cause__ = cause
            errors.append(err)
        if errors:
            if any(not e.worker_traceback for e in errors):  # a worker died: the env is not whole any more
                self.close(timeout=1.0)
            first = errors[0]
            if len(errors) > 1:
                first.args = (f"{first.args[0]}\n({len(errors) - 1} more shard(s) failed in the same call: "
                              f"{', '.join(str(e.shard) for e in errors[1:])})",)
            raise first
        return [results[j] for j in shards] if command in ("make_shard", "attach") else results

    def _died(self, j: int, command: str) -> ShardError:
        proc = self._procs[j]
        proc.join(1.0)
        envs = self._envs(j)
        return ShardError(f"ShardedVectorEnv shard {j} (envs {envs.start}..{envs.stop - 1}): its worker process "
                          f"exited (exit code {proc.exitcode}) during {command}", j, envs, command)

    def _adopt(self, metas: list[dict[str, Any]], shared_info_keys: Sequence[str] | None) -> None:
        """Spaces, metadata, autoreset mode and episode_info_keys from shard 0; every shard must agree."""
        first = metas[0]
        for j, meta in enumerate(metas[1:], start=1):
            for key, value in meta.items():
                if key != "num_envs" and value != first[key]:
                    raise ValueError(f"ShardedVectorEnv: shard {j}'s {key} {value!r} differs from shard 0's {first[key]!r}")
        space = first["single_observation_space"]
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"ShardedVectorEnv needs shards whose single_observation_space is a Box (one shared "
                            f"array), got {space}")
        self.single_observation_space = space
        self.single_action_space = first["single_action_space"]
        self.metadata = first["metadata"]
        mode = first["autoreset_mode"] or self.metadata.get("autoreset_mode") or AutoresetMode.NEXT_STEP
        self.autoreset_mode = AutoresetMode(mode)
        if first["episode_info_keys"] is not None:
            self.episode_info_keys = first["episode_info_keys"]
        self.shared_info_keys = tuple((first["episode_info_keys"] or ()) if shared_info_keys is None else shared_info_keys)

    def _attach(self) -> None:
        """Create the shared observation array, have every worker map its rows, then unlink the file."""
        space = self.single_observation_space
        shape = (self.num_envs, *space.shape)
        path = shared_file(int(np.prod(shape)) * space.dtype.itemsize)
        try:
            self._obs = map_shared(path, shape, space.dtype)
            self.direct_writes = self._call({j: ("attach", (path, shape, space.dtype, o))
                                             for j, o in enumerate(self.offsets)})
        finally:
            os.unlink(path)

    def _split_seeds(self, seed: Any) -> list[Any]:
        if seed is None:
            return [None] * len(self.sizes)
        if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            return [int(seed) + o for o in self.offsets]  # env i overall is seeded seed + i
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"ShardedVectorEnv.reset seed must be None, an int or {self.num_envs} seeds (one per "
                             f"env), got {len(seeds)}")
        return [seeds[o:o + n] for o, n in zip(self.offsets, self.sizes, strict=True)]

    def _split_options(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        out = [dict(options) for _ in self.sizes]
        for key in self.per_env_options:
            value = options.get(key)
            if value is None:
                continue
            if not isinstance(value, np.ndarray):
                value = list(value)
            if len(value) != self.num_envs:
                raise ValueError(f"ShardedVectorEnv.reset options[{key!r}] needs {self.num_envs} entries (one per "
                                 f"env), got {len(value)}")
            for opts, o, n in zip(out, self.offsets, self.sizes, strict=True):
                opts[key] = value[o:o + n].copy() if isinstance(value, np.ndarray) else value[o:o + n]
        return out

    def _merge(self, got: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """The shards' infos as one batched dict (shards missing from ``got`` were not called): shared info
        keys assembled here, the rest by :func:`merge_infos`."""
        infos: dict[int, dict[str, Any]] = {j: dict(info) for j, info in got.items()}
        assembled = {}
        for key in self.shared_info_keys:
            parts = {j: (info.pop(key), info.pop(f"_{key}", None)) for j, info in infos.items()
                     if isinstance(info.get(key), np.ndarray | InShared | Rows)}
            if parts:
                assembled[key] = self._assemble(key, parts)
        out = merge_infos([(infos.get(j), n) for j, n in enumerate(self.sizes)])
        for key, (array, mask) in assembled.items():
            out[key], out[f"_{key}"] = array, mask
        return out

    def _assemble(self, key: str, parts: dict[int, tuple[Any, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """One shared info key over all envs, from each shard's rows in the shared array (``InShared``), its
        masked rows (``Rows``) or its whole array; the shared array itself when every shard's value is in
        it (a copy with ``copy=True``). The first time the key comes, its shared array is made."""
        mask = np.zeros(self.num_envs, np.bool_)
        for j, (_, m) in parts.items():
            mask[self._envs(j).start:self._envs(j).stop] = True if m is None else m
        shared = self._info_arrays.get(key)
        if len(parts) == len(self.sizes) and all(isinstance(v, InShared) for v, _ in parts.values()):
            assert shared is not None
            return (_read_only_copy(shared) if self.copy else shared), mask
        template = shared if shared is not None else next(v.values if isinstance(v, Rows) else v
                                                          for v, _ in parts.values() if not isinstance(v, InShared))
        array = np.zeros((self.num_envs, *template.shape[1:]), template.dtype)  # calloc: rows left out stay untouched
        for j, (value, _) in parts.items():
            envs = self._envs(j)
            if isinstance(value, InShared):
                array[envs.start:envs.stop] = shared[envs.start:envs.stop]
            elif isinstance(value, Rows):
                array[envs.start + value.index] = value.values
            else:
                array[envs.start:envs.stop] = value
        if shared is None and not self.closed:
            self._make_info_array(key, array.shape, array.dtype)
        return array, mask

    def _make_info_array(self, key: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        path = shared_file(int(np.prod(shape)) * dtype.itemsize)
        self._info_arrays[key] = map_shared(path, shape, dtype)
        self._to_attach.append((key, path, shape, dtype))

    def _out_obs(self) -> np.ndarray:
        assert self._obs is not None
        return _read_only_copy(self._obs) if self.copy else self._obs


def _read_only_copy(array: np.ndarray) -> np.ndarray:
    out = array.copy()
    out.setflags(write=False)
    return out
