"""The worker side of :class:`~spatialrl.envs.sharded.ShardedVectorEnv`: the loop each shard's process runs,
the markers its replies use for values already in shared memory, and the shared-memory files both sides map.

Kept apart from the parent class so each side reads on its own; the protocol (commands ``attach``,
``noop``, ``reset``, ``step``, ``close``; replies ``("ok", result)`` or ``("error", (type, message,
traceback, pickled exception))``) is described in ``sharded.py``'s module docstring.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import tempfile
import threading
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper


def _error(exc: BaseException) -> tuple[str, str, str, bytes | None]:
    try:
        blob: bytes | None = pickle.dumps(exc)
    except Exception:  # an exception that does not pickle still gets its type, message and traceback across
        blob = None
    return type(exc).__qualname__, str(exc), traceback.format_exc(), blob


def _describe(env: Any) -> dict[str, Any]:
    keys = getattr(env, "episode_info_keys", None)
    return {"num_envs": int(env.num_envs), "single_observation_space": env.single_observation_space,
            "single_action_space": env.single_action_space, "metadata": dict(getattr(env, "metadata", None) or {}),
            "autoreset_mode": getattr(env, "autoreset_mode", None),
            "episode_info_keys": None if keys is None else tuple(keys)}


def map_shared(path: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    # A plain ndarray view of the memmap: its base keeps the mapping alive as long as any view lives.
    return np.memmap(path, dtype=dtype, mode="r+", shape=shape).view(np.ndarray)


class InShared:
    """Stands for a shared info key's value in a worker's reply: it is in the worker's rows of the shared array."""


class Rows:
    """A shared info key's value sent sparsely: the rows ``index`` (its ``_key`` mask) hold ``values``, the
    others zeros."""

    def __init__(self, index: np.ndarray, values: np.ndarray):
        self.index, self.values = index, values


class _SharedInfos:
    """A worker's side of the shared info arrays: its rows of each key's array, whether the shard renders
    into them (``use_info_buffer``), and the last array it copied in (not copied again while unchanged)."""

    def __init__(self, env: Any, size: int):
        self.env, self.size = env, size
        self.rows: dict[str, np.ndarray] = {}
        self.in_place: dict[str, bool] = {}
        self.last: dict[str, np.ndarray] = {}

    def attach(self, key: str, path: str, shape: tuple[int, ...], dtype: np.dtype, start: int) -> None:
        rows = self.rows[key] = map_shared(path, shape, dtype)[start:start + self.size]
        use = getattr(self.env, "use_info_buffer", None)
        self.in_place[key] = bool(use(key, rows)) if callable(use) else False

    def encode(self, info: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
        for key in keys:
            value, rows = info.get(key), self.rows.get(key)
            if not (isinstance(value, np.ndarray) and value.shape[:1] == (self.size,)):
                continue
            if rows is not None and value is rows:
                info[key] = InShared()
            elif rows is not None and not self.in_place[key] and value.shape == rows.shape and value.dtype == rows.dtype:
                if not (value is self.last.get(key) and not value.flags.writeable):  # read-only: unchanged
                    rows[...] = value
                    self.last[key] = value
                info[key] = InShared()
            else:
                mask = info.get(f"_{key}")
                if isinstance(mask, np.ndarray) and not mask.all():
                    index = np.flatnonzero(mask)
                    info[key] = Rows(index, value[index])
        return info


def worker_main(index: int, make_shard: CloudpickleWrapper, size: int, conn: Any, info_keys: Sequence[str] | None) -> None:
    """Build shard ``index`` (``size`` envs), say what it is, then serve the parent's calls until "close"
    or until the parent is gone (EOF on the pipe). Each call is ``(command, data, shared info arrays to map
    first)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; its close() ends this process
    # and so is SIGTERM, which `timeout` and Slurm send to the whole process group: a trainer pauses at the
    # end of its update (train/run.py) and needs its env until then; close() escalates to SIGKILL
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    env = None
    try:
        try:
            env = make_shard.fn(size)
            if int(env.num_envs) != size:
                raise ValueError(f"make_shard({size}) made a vector env of {env.num_envs} envs")
            meta = _describe(env)
            keys = tuple(meta["episode_info_keys"] or ()) if info_keys is None else tuple(info_keys)
            conn.send(("ok", meta))
        except Exception as exc:
            conn.send(("error", _error(exc)))
            return
        rows: np.ndarray | None = None
        start = 0
        shared = _SharedInfos(env, size)
        while True:
            try:
                command, data, attach_infos = conn.recv()
            except (EOFError, OSError):
                return
            if command == "close":
                env.close()
                env = None
                conn.send(("ok", None))
                return
            try:
                for key, *where in attach_infos:
                    shared.attach(key, *where, start)
                if command == "attach":  # map the shared observations; let the shard render into its rows
                    start = data[3]
                    rows = map_shared(*data[:3])[start:start + size]
                    use = getattr(env, "use_observation_buffer", None)
                    result: Any = bool(use(rows)) if callable(use) else False
                elif command == "noop":  # a call for other shards that brought shared arrays to map
                    result = None
                elif command == "reset":
                    obs, info = env.reset(seed=data[0], options=data[1])
                    result = shared.encode(info, keys)
                elif command == "step":
                    obs, reward, terminated, truncated, info = env.step(data)
                    result = (np.asarray(reward), np.asarray(terminated), np.asarray(truncated), shared.encode(info, keys))
                else:
                    raise ValueError(f"unknown command {command!r}")
                if command in ("reset", "step") and obs is not rows:  # a shard that rendered into its rows is done
                    rows[...] = obs
            except Exception as exc:
                conn.send(("error", _error(exc)))
            else:
                conn.send(("ok", result))
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                env.close()


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Start workers with SIGINT ignored: the disposition survives exec, so a spawned worker still importing
    its modules is not interrupted by Ctrl-C either (Python keeps an ignored SIGINT ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def shared_file(nbytes: int) -> str:
    """A new file of ``nbytes`` in /dev/shm (RAM), or in the temp folder when /dev/shm is missing or too small
    (a container's default is 64 MiB; 1,024 frames of 640x360 are 708 MB)."""
    folder = None
    with contextlib.suppress(OSError):
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= nbytes:
            folder = "/dev/shm"
    fd, path = tempfile.mkstemp(prefix="spatialrl-sharded-", dir=folder)
    try:
        os.ftruncate(fd, nbytes)
    finally:
        os.close(fd)
    return path
