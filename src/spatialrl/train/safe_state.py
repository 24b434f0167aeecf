"""Trainer state files that cannot run code when loaded (issue 23, fault 10).

PPO's rollout state (the in-flight episodes of each env slot: :class:`EpisodeSpec`, the answers so far,
the :class:`Trajectory` with its token segments, conversations and images) used to be pickled whole and
read back with ``torch.load(weights_only=False)``: a run folder copied from someone else could execute
arbitrary code on resume. Now the state is written as plain data -- tensors, numbers, strings, bytes,
lists, tuples and dicts -- that ``torch.load(weights_only=True)`` reads without importing anything:

* a dataclass of :data:`DATACLASSES` (an explicit allow-list) becomes ``{TAG: "dataclass", "name", "fields"}``;
* a NumPy array or scalar becomes its raw bytes, dtype string and shape (exact: no float round trip; an
  array met several times -- one image in several segments' conversations -- is stored once and comes
  back as one array);
* a PIL image its mode, size and raw bytes;
* a dict that happens to hold the tag key is escaped as a list of items.

Anything else raises ``TypeError`` at save time (so an unsupported type is found when the checkpoint is
written, not when it is needed). Loading rejects any file that needs more than that with a
:class:`DataError` naming the file.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spatialrl.errors import DataError

TAG = "__spatialrl_state__"
FORMAT = "spatialrl-state"
VERSION = 1


def _allowed_dataclasses() -> dict[str, type]:
    from spatialrl.envs.registry import EpisodeSpec
    from spatialrl.rollout.trajectory import Segment, Trajectory, VisionGroup

    return {cls.__name__: cls for cls in (EpisodeSpec, Segment, Trajectory, VisionGroup)}


def encode(obj: Any, classes: dict[str, type] | None = None, memo: dict[int, Any] | None = None) -> Any:
    """``obj`` as plain data (see the module docstring); ``TypeError`` for a type with no safe form."""
    classes = _allowed_dataclasses() if classes is None else classes
    memo = {} if memo is None else memo

    def enc(x: Any) -> Any:
        return encode(x, classes, memo)

    if obj is None or isinstance(obj, bool | int | float | str | bytes | torch.Tensor):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError("a NumPy array of Python objects has no safe stored form")
        if id(obj) not in memo:  # the original is kept alive in the memo, so its id stays unique
            memo[id(obj)] = (obj, {TAG: "ndarray", "dtype": obj.dtype.str, "shape": list(obj.shape),
                                   "data": np.ascontiguousarray(obj).tobytes()})
        return memo[id(obj)][1]
    if isinstance(obj, np.generic):
        return {TAG: "npscalar", "dtype": obj.dtype.str, "data": obj.tobytes()}
    if isinstance(obj, list):
        return [enc(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(enc(x) for x in obj)
    if isinstance(obj, dict):
        if TAG in obj:
            return {TAG: "dict", "items": [(enc(k), enc(v)) for k, v in obj.items()]}
        return {enc(k): enc(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = type(obj).__name__
        if classes.get(name) is not type(obj):
            raise TypeError(f"dataclass {type(obj).__module__}.{name} is not in the safe-state allow-list")
        fields = {f.name: enc(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return {TAG: "dataclass", "name": name, "fields": fields}
    from PIL import Image

    if isinstance(obj, Image.Image):
        return {TAG: "image", "mode": obj.mode, "size": tuple(obj.size), "data": obj.tobytes()}
    raise TypeError(f"{type(obj).__module__}.{type(obj).__qualname__} has no safe stored form")


def decode(obj: Any, classes: dict[str, type] | None = None, memo: dict[int, Any] | None = None) -> Any:
    """Inverse of :func:`encode`; a malformed stored form raises ``ValueError``."""
    classes = _allowed_dataclasses() if classes is None else classes
    memo = {} if memo is None else memo

    def dec(x: Any) -> Any:
        return decode(x, classes, memo)

    if isinstance(obj, list):
        return [dec(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(dec(x) for x in obj)
    if not isinstance(obj, dict):
        return obj
    kind = obj.get(TAG)
    if kind is None:
        return {dec(k): dec(v) for k, v in obj.items()}
    if kind == "ndarray":
        if id(obj) not in memo:
            memo[id(obj)] = np.frombuffer(obj["data"], dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()
        return memo[id(obj)]
    if kind == "npscalar":
        return np.frombuffer(obj["data"], dtype=np.dtype(obj["dtype"]))[0]
    if kind == "dict":
        return {dec(k): dec(v) for k, v in obj["items"]}
    if kind == "dataclass":
        cls = classes.get(obj["name"])
        if cls is None:
            raise ValueError(f"dataclass {obj['name']!r} is not in the allow-list {sorted(classes)}")
        fields = {k: dec(v) for k, v in obj["fields"].items()}
        known = {f.name: f for f in dataclasses.fields(cls)}
        if set(fields) - set(known):
            raise ValueError(f"{obj['name']}: unknown fields {sorted(set(fields) - set(known))}")
        init = {k: v for k, v in fields.items() if known[k].init}
        out = cls(**init)
        for k, v in fields.items():
            if not known[k].init:
                object.__setattr__(out, k, v)
        return out
    if kind == "image":
        from PIL import Image

        return Image.frombytes(obj["mode"], tuple(obj["size"]), obj["data"])
    raise ValueError(f"unknown stored type {kind!r}")


def state_bytes(state: Any) -> bytes:
    """``state`` encoded and serialised with ``torch.save`` (tensors stay tensors, shared storage kept)."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "version": VERSION, "state": encode(state)}, buffer)
    return buffer.getvalue()


def load_state(path: str | Path) -> Any:
    """Read a file written from :func:`state_bytes` with ``torch.load(weights_only=True)``: no code runs,
    whatever the file holds. A file that needs anything beyond plain data is a :class:`DataError`."""
    path = Path(path)
    try:
        blob = torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError, EOFError) as e:
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(e).splitlines()]
        lines = [line for line in lines if line] or [type(e).__name__]
        first = next((line for line in lines if "Unsupported global" in line or "WeightsUnpickler" in line), lines[0])
        first = first.split(" by default.")[0]  # not torch's advice to allow-list the global
        raise DataError(
            f"{path}: refused to load: it is not plain data that can be read safely ({first[:300]}). "
            "Trainer state is read with torch.load(weights_only=True) so that a run folder cannot run code; "
            "a file written by spatialrl before this check (or tampered with) cannot be resumed: start the "
            "run again, or resume from an earlier checkpoint written by this version"
        ) from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise DataError(f"{path}: not a spatialrl state file (no {FORMAT!r} header)")
    if blob.get("version") != VERSION:
        raise DataError(f"{path}: state format version {blob.get('version')!r}, this spatialrl reads {VERSION}")
    try:
        return decode(blob["state"])
    except (ValueError, TypeError, KeyError) as e:
        raise DataError(f"{path}: malformed state ({type(e).__name__}: {e})") from None
