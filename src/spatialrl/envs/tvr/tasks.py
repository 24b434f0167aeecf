"""TVR task records and bench folders: the schema, scene ids, loading with field-by-field validation.

A task record keeps TVRBench's fields exactly (``task_id, dataset, scene, difficulty, seg_count,
bfs_distance, target{position{x,y,z}, rotation_y, horizon}, start{...}``; ``dataset`` is ``single`` or
``multi`` here instead of ``ithor``/``procthor``) plus ``optimal_steps`` (oracle actions including the
final Stop), ``category`` (``single-easy`` …) and ``mode`` (``navigation``, ``rotate_only``,
``move_only``). ``position.y`` is the camera (eye) height of the scene in metres.

A bench folder::

    bench.json                manifest: seed, sizes, generator version, timings, and ``files``: the
                              SHA-256 of scenes.json and of every task file (checked on load)
    scenes.json               split -> [{scene, kind, room_type, seed, fingerprint}]
    tasks/{eval,sft,rl,diag_rotate,diag_move}.json

Integrity: a file whose hash differs from ``bench.json``'s ``files`` (edited, truncated or swapped
since ``make-bench``), a malformed ``scenes.json`` entry, a task whose scene ``scenes.json`` does not
list, and an empty split are errors naming the file and field.

A scene id names its generator inputs, ``<kind>-<room type>-<6-digit seed>`` → ``generate_house(seed,
kind, room_type)`` (``single-kitchen-004211``: one kitchen; ``multi-bedroom-000731``: a 2–3-room house
whose first room is a bedroom), so a bench rebuilds every house from its files alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from spatialrl.envs.tvr.lattice import GRID, MODE_ACTIONS, PITCHES, YAW_STEP, Pose
from spatialrl.errors import DataError
from spatialrl.io import read_json

DATASETS = ("single", "multi")
DIFFICULTIES = ("easy", "hard")
CATEGORIES = tuple(f"{d}-{k}" for d in DATASETS for k in DIFFICULTIES)
SPLITS = ("eval", "sft", "rl", "diag_rotate", "diag_move")
TASK_FIELDS = ("task_id", "dataset", "scene", "difficulty", "seg_count", "bfs_distance", "target", "start",
               "optimal_steps", "category", "mode")
SCENE_ID = re.compile(r"^(single|multi)-([a-z_]+)-(\d{6})$")


@dataclass(frozen=True)
class SceneRef:
    """What it takes to rebuild a scene: generator kind, room type and seed."""

    kind: str  # "single" | "multi"
    room_type: str  # kitchen / living_room / bedroom / bathroom (a house's first room)
    seed: int

    @property
    def scene_id(self) -> str:
        return f"{self.kind}-{self.room_type}-{self.seed:06d}"

    @classmethod
    def parse(cls, scene_id: str) -> SceneRef:
        from spatialrl.worlds.layout import ROOM_TYPES

        m = SCENE_ID.match(scene_id) if isinstance(scene_id, str) else None
        if m is None or m.group(2) not in ROOM_TYPES:
            raise DataError(
                f"unknown scene id {scene_id!r}: expected '<single|multi>-<room type>-<6-digit seed>' with a "
                f"room type in {', '.join(ROOM_TYPES)}, e.g. 'single-kitchen-004211'"
            )
        return cls(kind=m.group(1), room_type=m.group(2), seed=int(m.group(3)))

    def to_json(self) -> dict[str, Any]:
        return {"scene": self.scene_id, "kind": self.kind, "room_type": self.room_type, "seed": self.seed}


def pose_from_record(view: dict[str, Any]) -> Pose:
    """Lattice pose of a (validated) TVRBench viewpoint record."""
    return Pose(
        int(round(view["position"]["x"] / GRID)),
        int(round(view["position"]["z"] / GRID)),
        int(round(view["rotation_y"])) % 360,
        int(round(view["horizon"])),
    )


def task_poses(task: dict[str, Any]) -> tuple[Pose, Pose]:
    """``(start, target)`` lattice poses of a task record."""
    return pose_from_record(task["start"]), pose_from_record(task["target"])


# ----------------------------------------------------------------------------------------------- validation
class _Bad(Exception):
    def __init__(self, field: str, msg: str):
        super().__init__(field, msg)
        self.field, self.msg = field, msg


def _int(task: dict, key: str, minimum: int) -> None:
    v = task[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _Bad(key, f"expected an integer >= {minimum}, got {v!r}")


def _number(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _Bad(field, f"expected a finite number, got {v!r}")
    return float(v)


def _view(task: dict, key: str) -> None:
    view = task[key]
    if not isinstance(view, dict):
        raise _Bad(key, f"expected an object with position/rotation_y/horizon, got {type(view).__name__}")
    for sub in ("position", "rotation_y", "horizon"):
        if sub not in view:
            raise _Bad(f"{key}.{sub}", "missing")
    pos = view["position"]
    if not isinstance(pos, dict):
        raise _Bad(f"{key}.position", f"expected an object with x, y, z, got {type(pos).__name__}")
    for axis in ("x", "y", "z"):
        if axis not in pos:
            raise _Bad(f"{key}.position.{axis}", "missing")
        v = _number(pos[axis], f"{key}.position.{axis}")
        if axis != "y" and abs(v / GRID - round(v / GRID)) > 1e-6:
            raise _Bad(f"{key}.position.{axis}", f"expected a multiple of the {GRID} m grid, got {v!r}")
    yaw = _number(view["rotation_y"], f"{key}.rotation_y")
    if not 0 <= yaw < 360 or abs(yaw / YAW_STEP - round(yaw / YAW_STEP)) > 1e-6:
        raise _Bad(f"{key}.rotation_y", f"expected a multiple of {YAW_STEP} in [0, 360), got {yaw!r}")
    pitch = _number(view["horizon"], f"{key}.horizon")
    if pitch not in PITCHES:
        raise _Bad(f"{key}.horizon", f"expected one of {list(PITCHES)}, got {pitch!r}")


def validate_task(task: Any) -> None:
    """Raise ``_Bad(field, message)`` for the first problem in one task record."""
    if not isinstance(task, dict):
        raise _Bad("<record>", f"expected an object, got {type(task).__name__}")
    for key in TASK_FIELDS:
        if key not in task:
            raise _Bad(key, "missing")
    if not isinstance(task["task_id"], str) or not task["task_id"]:
        raise _Bad("task_id", f"expected a non-empty string, got {task['task_id']!r}")
    if task["dataset"] not in DATASETS:
        raise _Bad("dataset", f"expected one of {list(DATASETS)}, got {task['dataset']!r}")
    if task["difficulty"] not in DIFFICULTIES:
        raise _Bad("difficulty", f"expected one of {list(DIFFICULTIES)}, got {task['difficulty']!r}")
    if task["category"] != f"{task['dataset']}-{task['difficulty']}":
        raise _Bad("category", f"expected {task['dataset']}-{task['difficulty']!s} (dataset-difficulty), "
                               f"got {task['category']!r}")
    if task["mode"] not in MODE_ACTIONS:
        raise _Bad("mode", f"expected one of {list(MODE_ACTIONS)}, got {task['mode']!r}")
    try:
        ref = SceneRef.parse(task["scene"])
    except DataError as e:
        raise _Bad("scene", str(e)) from None
    if ref.kind != task["dataset"]:
        raise _Bad("scene", f"scene {task['scene']!r} is a {ref.kind} scene but dataset is {task['dataset']!r}")
    _int(task, "seg_count", 0)
    _int(task, "bfs_distance", 0)
    _int(task, "optimal_steps", 1)
    _view(task, "target")
    _view(task, "start")


def validate_tasks(tasks: Any, source: str) -> list[dict[str, Any]]:
    """Validate a list of task records; errors name ``source``, the task index and the field."""
    if not isinstance(tasks, list):
        raise DataError(f"{source}: expected a JSON list of task records, got {type(tasks).__name__}")
    seen: set[str] = set()
    for i, task in enumerate(tasks):
        try:
            validate_task(task)
        except _Bad as e:
            tid = task.get("task_id") if isinstance(task, dict) else None
            who = f"task [{i}]" + (f" ({tid})" if isinstance(tid, str) else "")
            raise DataError(f"{source}: {who} field '{e.field}': {e.msg}") from None
        if task["task_id"] in seen:
            raise DataError(f"{source}: task [{i}] field 'task_id': duplicate id {task['task_id']!r}")
        seen.add(task["task_id"])
    return tasks


def validate_scenes(scenes: Any, source: str) -> None:
    """``scenes.json``: ``{split: [{scene, kind, room_type, seed, fingerprint?}, ...]}`` with each entry's
    fields agreeing with its scene id; errors name ``source``, the split, the index and the field."""
    if not isinstance(scenes, dict):
        raise DataError(f"{source}: expected an object of split -> scene list, got {type(scenes).__name__}")
    for split, refs in scenes.items():
        if not isinstance(refs, list):
            raise DataError(f"{source}: {split}: expected a list of scene entries, got {type(refs).__name__}")
        for i, entry in enumerate(refs):
            where = f"{source}: {split}[{i}]"
            if not isinstance(entry, dict):
                raise DataError(f"{where}: expected an object with scene, kind, room_type, seed, got "
                                f"{json.dumps(entry)}")
            try:
                ref = SceneRef.parse(entry.get("scene"))
            except DataError as e:
                raise DataError(f"{where} field 'scene': {e}") from None
            for key, want in (("kind", ref.kind), ("room_type", ref.room_type), ("seed", ref.seed)):
                if entry.get(key) != want:
                    raise DataError(f"{where} field '{key}': {entry.get(key)!r} disagrees with scene id "
                                    f"{ref.scene_id!r} (expected {want!r})")
            fp = entry.get("fingerprint")
            if fp is not None and (not isinstance(fp, str) or not fp):
                raise DataError(f"{where} field 'fingerprint': expected a hash string, got {fp!r}")


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate one task file."""
    return validate_tasks(read_json(path, "task file not found"), str(path))


class Bench:
    """A bench folder: manifest, scene splits and validated task files (loaded on first use)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not (self.root / "bench.json").is_file():
            raise DataError(f"{self.root}: not a TVR bench folder (no bench.json); "
                            "make one with `spatialrl tvr make-bench --out DIR`")
        self._tasks: dict[str, list[dict[str, Any]]] = {}
        self._by_id: dict[str, dict[str, Any]] | None = None
        self._split_index: dict[str, dict[str, dict[str, Any]]] = {}
        self._fingerprints: dict[str, str | None] | None = None

    @cached_property
    def manifest(self) -> dict[str, Any]:
        manifest = read_json(self.root / "bench.json")
        if not isinstance(manifest, dict):
            raise DataError(f"{self.root / 'bench.json'}: expected a JSON object, got {type(manifest).__name__}")
        files = manifest.get("files")
        if files is not None and (not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in files.items())):
            raise DataError(f"{self.root / 'bench.json'}: field 'files': expected {{relative path: sha256}}")
        return manifest

    def _read(self, rel: str) -> Any:
        """Read ``root/rel`` as JSON, checking it against the hash ``bench.json`` recorded (if any)."""
        path = self.root / rel
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        data = path.read_bytes()
        files = self.manifest.get("files")
        if files is not None:
            if rel not in files:
                raise DataError(f"{path}: not listed in {self.root / 'bench.json'} field 'files' (added after "
                                "make-bench); regenerate the bench with `spatialrl tvr make-bench`")
            if hashlib.sha256(data).hexdigest() != files[rel]:
                raise DataError(f"{path}: does not match its fingerprint in {self.root / 'bench.json'} (edited, "
                                "truncated or swapped since make-bench); regenerate the bench with "
                                "`spatialrl tvr make-bench`")
        try:
            return json.loads(data.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: malformed JSON: {e}") from None

    @cached_property
    def scenes(self) -> dict[str, list[dict[str, Any]]]:
        scenes = self._read("scenes.json")
        validate_scenes(scenes, str(self.root / "scenes.json"))
        return scenes

    def has_scene_list(self) -> bool:
        """Whether the bench lists its scenes (every made bench does; a hand-made task folder may not)."""
        return self.manifest.get("files") is not None or (self.root / "scenes.json").is_file()

    def fingerprint(self, scene_id: str) -> str | None:
        """The house fingerprint recorded for ``scene_id`` when the bench was made (None if absent)."""
        if self._fingerprints is None:
            self._fingerprints = {e["scene"]: e.get("fingerprint") for refs in self.scenes.values() for e in refs}
        return self._fingerprints.get(scene_id)

    def splits(self) -> list[str]:
        """Splits with a task file, less those the bench was made without (size 0 in ``bench.json``)."""
        sizes = self.manifest.get("sizes")
        sizes = sizes if isinstance(sizes, dict) else {}
        return [s for s in SPLITS if (self.root / "tasks" / f"{s}.json").is_file() and sizes.get(s) != 0]

    def tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in self._tasks:
            path = self.root / "tasks" / f"{split}.json"
            if not path.is_file():
                raise DataError(f"{self.root}: unknown split {split!r}; this bench has "
                                f"{', '.join(self.splits()) or 'no task files'}")
            tasks = validate_tasks(self._read(f"tasks/{split}.json"), str(path))
            if self.has_scene_list():
                for i, t in enumerate(tasks):
                    if self.fingerprint(t["scene"]) is None:
                        raise DataError(f"{path}: task [{i}] ({t['task_id']}) field 'scene': {t['scene']!r} has no "
                                        f"fingerprinted entry in {self.root / 'scenes.json'} (a swapped or "
                                        "hand-edited scene); regenerate the bench with `spatialrl tvr make-bench`")
            self._tasks[split] = tasks
        if not self._tasks[split]:
            size = self.manifest.get("sizes", {}).get(split) if isinstance(self.manifest.get("sizes"), dict) else None
            made = f" (made with {split}={size})" if size is not None else ""
            raise DataError(f"{self.root / 'tasks' / f'{split}.json'}: split {split!r} has no tasks{made}; choose "
                            f"another split or make a bench with `spatialrl tvr make-bench --sizes {split}=N`")
        return self._tasks[split]

    def _tasks_or_empty(self, split: str) -> list[dict[str, Any]]:
        try:
            return self.tasks(split)
        except DataError:
            if self._tasks.get(split) == []:
                return []
            raise

    def task(self, task_id: str, split: str | None = None) -> dict[str, Any]:
        """Find a task by id: in ``split`` first (cheap), then in every split."""
        if split is not None and split in self.splits():
            if split not in self._split_index:
                self._split_index[split] = {t["task_id"]: t for t in self.tasks(split)}
            if task_id in self._split_index[split]:
                return self._split_index[split][task_id]
        if self._by_id is None:
            self._by_id = {t["task_id"]: t for s in self.splits() for t in self._tasks_or_empty(s)}
        if task_id not in self._by_id:
            raise DataError(f"{self.root}: unknown task id {task_id!r}")
        return self._by_id[task_id]


_OPEN: dict[tuple[str, int], Bench] = {}


def open_bench(root: str | Path) -> Bench:
    """A shared :class:`Bench` per folder (and manifest version), so the env slots of one process load and
    validate the task files once."""
    root = Path(root)
    manifest = root / "bench.json"
    key = (str(root.resolve()), manifest.stat().st_mtime_ns if manifest.is_file() else 0)
    if key not in _OPEN:
        _OPEN[key] = Bench(root)
    return _OPEN[key]


