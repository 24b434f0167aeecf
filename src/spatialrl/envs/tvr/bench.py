"""Benchmark generation (``spatialrl tvr make-bench``): scene pools, the four categories, diagnostics.

TVRBench's recipe (``tvrbench/task/sampler.py`` + its released task files), re-run on our houses:

* scene pools per family (single room / 2–3-room house), disjoint across SFT / eval / RL (TVRBench:
  20 / 40 / 60 scenes per family);
* target: a uniform reachable cell, yaw = heading to the centroid of its room's reachable cells +
  uniform(−45°, 45°), snapped to 45°; pitch uniform over {−30, 0, +30};
* visual richness ``seg_count``: distinct objects (instance id ≠ 0, ≥ ``SEG_MIN_PIXELS`` pixels) in an
  instance-id render of the target view at ``SEG_SIZE`` (320×180, FOV 60°). Easy ≥ 9, hard 3–6;
* start: a uniform cell whose 4-connected grid distance to the target (``bfs_distance``, positions only)
  is 2–8 (single) or 10–20 (multi), uniform yaw and pitch; two starts per target (``_s00``/``_s01``);
* ``optimal_steps``: the oracle's action count (Stop included) under the task's mode;
* diagnostics from the eval single-room scenes: ``rotate_only`` (same cell, yaw and pitch both differ,
  translations disabled) and ``move_only`` (same yaw/pitch, cells 2–8 apart, rotations/looks disabled).

Targets are resampled until the filters pass. Every scene draws from its own RNG stream, seeded from
(bench seed, split, scene), so a bench is a pure function of its seed and sizes.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.lattice import PITCHES, YAWS, Lattice, Pose, heading_towards, snap_yaw
from spatialrl.envs.tvr.scenes import (
    FOV_DEG,
    SEG_MIN_PIXELS,
    SEG_SIZE,
    camera_for,
    load_house,
    scene_fingerprint,
    scene_lattice,
)
from spatialrl.envs.tvr.tasks import CATEGORIES, DATASETS, DIFFICULTIES, SceneRef, validate_tasks
from spatialrl.errors import DataError
from spatialrl.io import atomic_write_json
from spatialrl.worlds.layout import ROOM_TYPES

GENERATOR_VERSION = "tvr-bench/1"
PATH_RANGES = {"single": (2, 8), "multi": (10, 20)}  # bfs_distance (cells) of start → target
SEG_RULES = {"easy": (9, None), "hard": (3, 6)}  # visible objects in the target view, inclusive
STARTS_PER_TARGET = 2
NAV_SPLITS = ("eval", "sft", "rl")
DIAG_SPLITS = {"diag_rotate": "rotate_only", "diag_move": "move_only"}

DEFAULT_SIZES = {"eval": 500, "sft": 1600, "rl": 4800, "diag_rotate": 100, "diag_move": 100}
DEFAULT_SCENES = {"sft": 20, "eval": 40, "rl": 60}  # per family
TINY_SIZES = {"eval": 8, "sft": 4, "rl": 4, "diag_rotate": 4, "diag_move": 4}
TINY_SCENES = {"sft": 1, "eval": 2, "rl": 1}


@dataclass
class BenchConfig:
    """What a bench is a function of (recorded in ``bench.json``)."""

    seed: int = 0
    sizes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SIZES))
    scenes_per_split: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SCENES))
    tiny: bool = False

    @classmethod
    def preset(cls, tiny: bool = False, seed: int = 0, sizes: dict[str, int] | None = None,
               scenes: dict[str, int] | None = None) -> BenchConfig:
        cfg = cls(seed=seed, sizes=dict(TINY_SIZES if tiny else DEFAULT_SIZES),
                  scenes_per_split=dict(TINY_SCENES if tiny else DEFAULT_SCENES), tiny=tiny)
        for name, value in (sizes or {}).items():
            if name not in DEFAULT_SIZES:
                raise ValueError(f"unknown split {name!r} in sizes; expected {', '.join(DEFAULT_SIZES)}")
            cfg.sizes[name] = value
        for name, value in (scenes or {}).items():
            if name not in DEFAULT_SCENES:
                raise ValueError(f"unknown split {name!r} in scenes; expected {', '.join(DEFAULT_SCENES)}")
            cfg.scenes_per_split[name] = value
        for what, d in (("size", cfg.sizes), ("scene count", cfg.scenes_per_split)):
            for name, v in d.items():
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{what} of {name!r} must be an integer >= 0, got {v!r}")
        for split in NAV_SPLITS:
            if cfg.sizes[split] and not cfg.scenes_per_split[split]:
                raise ValueError(f"split {split!r} asks for {cfg.sizes[split]} tasks but has no scenes")
        return cfg


def parse_counts(text: str | None) -> dict[str, int]:
    """``"eval=500,sft=1600"`` → ``{"eval": 500, "sft": 1600}``."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"expected NAME=INTEGER pairs separated by commas, got {item.strip()!r}")
        out[name.strip()] = int(value)
    return out


# ------------------------------------------------------------------------------------------- scene pools
def plan_scenes(cfg: BenchConfig) -> dict[str, list[SceneRef]]:
    """Disjoint scene pools: ``{split: [SceneRef, ...]}`` with single-room scenes first, then houses."""
    n_total = 2 * sum(cfg.scenes_per_split.values())
    rng = np.random.default_rng([cfg.seed, 0x5CE7E])
    seeds = rng.choice(1_000_000, size=n_total, replace=False).tolist()
    pools: dict[str, list[SceneRef]] = {s: [] for s in DEFAULT_SCENES}
    k = 0
    for kind in DATASETS:  # room types (a house's first room) cycle so every pool mixes all four
        for split in DEFAULT_SCENES:
            for i in range(cfg.scenes_per_split[split]):
                pools[split].append(SceneRef(kind, ROOM_TYPES[i % len(ROOM_TYPES)], int(seeds[k])))
                k += 1
    return pools


# ------------------------------------------------------------------------------------------- one scene
class SceneSampler:
    """Target/start sampling in one scene, with cached seg counts and grid distances."""

    def __init__(self, ref: SceneRef, id_renderer: Any, mode: str = "navigation"):
        self.ref, self.mode = ref, mode
        self.house = load_house(ref.scene_id)
        self.fingerprint = scene_fingerprint(ref.scene_id)  # cached now, while the house is at hand
        self.lattice: Lattice = scene_lattice(ref.scene_id, mode)
        self.cells = self.lattice.cells
        self.eye_height = float(self.house.eye_height)
        self._renderer = id_renderer
        self._scene = None
        self._seg: dict[Pose, int] = {}
        self._bfs: dict[tuple[int, int], dict[tuple[int, int], int]] = {}

    def close(self) -> None:
        if self._scene is not None:
            self._renderer.release(self._scene)
            self._scene = None

    def centroid_for(self, cell: tuple[int, int]) -> tuple[float, float]:
        """Centroid of the reachable cells of the room that holds ``cell`` (the whole floor if none)."""
        room = self.house.room_of(cell)
        return room.centroid if room is not None and room.cells else self.lattice.centroid()

    def sample_target(self, rng: np.random.Generator) -> Pose:
        ix, iz = self.cells[int(rng.integers(len(self.cells)))]
        base = heading_towards((ix * 0.25, iz * 0.25), self.centroid_for((ix, iz)))
        yaw = snap_yaw(base + rng.uniform(-45.0, 45.0))
        return Pose(ix, iz, yaw, PITCHES[int(rng.integers(len(PITCHES)))])

    def seg_counts(self, poses: list[Pose]) -> list[int]:
        """``seg_count`` of each pose, rendering the uncached ones in one batch."""
        todo = [p for p in dict.fromkeys(poses) if p not in self._seg]
        if todo:
            from spatialrl.worlds.houses import count_visible_objects

            if self._scene is None:
                self._scene = self._renderer.upload(self.house.meshes, self.house.textures)
            ids = self._renderer.render_ids(self._scene, [camera_for(self.house, p, FOV_DEG) for p in todo])
            for p, frame in zip(todo, ids, strict=True):
                self._seg[p] = int(count_visible_objects(frame, SEG_MIN_PIXELS))
        return [self._seg[p] for p in poses]

    def grid_distances(self, cell: tuple[int, int]) -> dict[tuple[int, int], int]:
        if cell not in self._bfs:
            self._bfs[cell] = oracle.grid_bfs_distance(self.lattice.cell_set, cell)
        return self._bfs[cell]

    def record(self, task_id: str, difficulty: str, seg: int, start: Pose, target: Pose, bfs: int,
               optimal: int) -> dict[str, Any]:
        return {
            "task_id": task_id,
            "dataset": self.ref.kind,
            "scene": self.ref.scene_id,
            "difficulty": difficulty,
            "seg_count": seg,
            "bfs_distance": bfs,
            "target": target.to_dict(self.eye_height),
            "start": start.to_dict(self.eye_height),
            "optimal_steps": optimal,
            "category": f"{self.ref.kind}-{difficulty}",
            "mode": self.mode,
        }

    def make_tasks(self, difficulty: str, count: int, rng: np.random.Generator, batch: int = 16,
                   max_targets: int | None = None) -> list[dict[str, Any]]:
        """Up to ``count`` tasks of ``difficulty`` (fewer if the scene runs out of qualifying targets)."""
        lo_seg, hi_seg = SEG_RULES[difficulty]
        lo, hi = PATH_RANGES[self.ref.kind] if self.mode != "rotate_only" else (0, 0)
        max_targets = max_targets if max_targets is not None else 60 * count + 200
        tasks: list[dict[str, Any]] = []
        tried, t_index = 0, 0
        tag = "" if self.mode == "navigation" else f"_{self.mode}"
        while len(tasks) < count and tried < max_targets:
            targets = [self.sample_target(rng) for _ in range(batch)]
            tried += batch
            for target, seg in zip(targets, self.seg_counts(targets), strict=True):
                if len(tasks) >= count:
                    break
                if seg < lo_seg or (hi_seg is not None and seg > hi_seg):
                    continue
                grid = self.grid_distances(target.cell)
                dist = oracle.distances_to(self.lattice, target)
                starts = self._starts(target, grid, dist, lo, hi, min(STARTS_PER_TARGET, count - len(tasks)), rng)
                if not starts:
                    continue
                for s_index, start in enumerate(starts):
                    tid = f"{self.ref.scene_id}_{difficulty}{tag}_t{t_index:02d}_s{s_index:02d}"
                    tasks.append(self.record(tid, difficulty, seg, start, target, grid[start.cell],
                                             oracle.optimal_steps(self.lattice, start, target, dist)))
                t_index += 1
        return tasks

    def _starts(self, target: Pose, grid: dict, dist: np.ndarray, lo: int, hi: int, n: int,
                rng: np.random.Generator) -> list[Pose]:
        if self.mode == "rotate_only":  # same cell, yaw and pitch both differ (TVRBench fixed_pos)
            out = []
            for _ in range(n):
                yaw = [y for y in YAWS if y != target.yaw][int(rng.integers(len(YAWS) - 1))]
                pitch = [p for p in PITCHES if p != target.pitch][int(rng.integers(len(PITCHES) - 1))]
                out.append(Pose(target.ix, target.iz, yaw, pitch))
            return out
        cells = [c for c, d in grid.items() if lo <= d <= hi]
        if self.mode == "move_only":
            # at a diagonal heading every move is diagonal, so only cells of one colour of the
            # checkerboard can be reached without turning: keep those the oracle can reach
            cells = [c for c in cells
                     if dist[self.lattice.state_id(Pose(c[0], c[1], target.yaw, target.pitch))] != oracle.UNREACHABLE]
        if not cells:
            return []
        cells.sort()
        out = []
        for _ in range(n):
            ix, iz = cells[int(rng.integers(len(cells)))]
            if self.mode == "move_only":  # same yaw and pitch (TVRBench fixed_orient)
                out.append(Pose(ix, iz, target.yaw, target.pitch))
            else:
                out.append(Pose(ix, iz, YAWS[int(rng.integers(len(YAWS)))], PITCHES[int(rng.integers(len(PITCHES)))]))
        return out


# ------------------------------------------------------------------------------------------- a split
def _quotas(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _scene_rng(seed: int, split: str, ref: SceneRef, salt: int = 0) -> np.random.Generator:
    split_code = list(DEFAULT_SIZES).index(split)
    return np.random.default_rng([seed, split_code, ref.seed, salt])


def generate_split(cfg: BenchConfig, split: str, scenes: list[SceneRef], id_renderer: Any,
                   advance: Any = None) -> list[dict[str, Any]]:
    """All tasks of one split: equal quotas for the four categories (diagnostics: easy/hard halves of
    single-room tasks), spread evenly over the split's scenes, with shortfalls carried to the next scene."""
    mode = DIAG_SPLITS.get(split, "navigation")
    families = ("single",) if mode != "navigation" else DATASETS
    per_cat = _quotas(cfg.sizes[split], len(families) * len(DIFFICULTIES))
    tasks: list[dict[str, Any]] = []
    for f_index, family in enumerate(families):
        pool = [r for r in scenes if r.kind == family]
        want = {d: per_cat[f_index * len(DIFFICULTIES) + i] for i, d in enumerate(DIFFICULTIES)}
        if not any(want.values()):
            continue
        if not pool:
            raise DataError(f"split {split!r} needs {family} scenes but its scene pool has none")
        quota = {d: _quotas(want[d], len(pool)) for d in DIFFICULTIES}
        carry = dict.fromkeys(DIFFICULTIES, 0)
        for j, ref in enumerate(pool):
            sampler = SceneSampler(ref, id_renderer, mode)
            try:
                rng = _scene_rng(cfg.seed, split, ref)
                for difficulty in DIFFICULTIES:
                    need = quota[difficulty][j] + carry[difficulty]
                    made = sampler.make_tasks(difficulty, need, rng) if need else []
                    carry[difficulty] = need - len(made)
                    tasks += made
                    if advance is not None:
                        advance(len(made))
            finally:
                sampler.close()
        # a last pass over the pool for whatever the scenes could not give on the first try
        for difficulty in DIFFICULTIES:
            for ref in pool:
                if carry[difficulty] <= 0:
                    break
                sampler = SceneSampler(ref, id_renderer, mode)
                try:
                    made = sampler.make_tasks(difficulty, carry[difficulty], _scene_rng(cfg.seed, split, ref, 1))
                finally:
                    sampler.close()
                made = [t | {"task_id": t["task_id"] + "_r"} for t in made]
                carry[difficulty] -= len(made)
                tasks += made
                if advance is not None:
                    advance(len(made))
            if carry[difficulty] > 0:
                raise DataError(f"split {split!r}: the {family} scenes yield only {want[difficulty] - carry[difficulty]}"
                                f" of {want[difficulty]} {difficulty} tasks; use more scenes or fewer tasks")
    return validate_tasks(tasks, f"generated {split} tasks")


# ------------------------------------------------------------------------------------------- a bench
def make_bench(out: str | Path, cfg: BenchConfig, force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Generate a bench folder at ``out`` (atomically: built in a temp folder, then renamed)."""
    out = Path(out)
    if out.exists() and not force:
        raise DataError(f"{out} already exists; pass --overwrite to replace it")
    from spatialrl.render import Renderer

    t_start = time.perf_counter()
    pools = plan_scenes(cfg)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    timings: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    used: set[str] = set()
    renderer = Renderer(*SEG_SIZE)
    bar = _progress(progress, sum(cfg.sizes.values()))
    try:
        for split in (*NAV_SPLITS, *DIAG_SPLITS):
            t0 = time.perf_counter()
            scenes = pools["eval"] if split in DIAG_SPLITS else pools[split]
            if bar is not None:
                bar[0].update(bar[1], description=f"tvr bench · {split}")
            advance = (lambda n: bar[0].advance(bar[1], n)) if bar is not None else None
            tasks = generate_split(cfg, split, scenes, renderer, advance) if cfg.sizes[split] else []
            used.update(t["scene"] for t in tasks)
            atomic_write_json(tmp / "tasks" / f"{split}.json", tasks)
            timings[split] = round(time.perf_counter() - t0, 3)
            counts[split] = {c: sum(t["category"] == c for t in tasks) for c in CATEGORIES}
    finally:
        if bar is not None:
            bar[0].stop()
        renderer.close()
    # fingerprints of the scenes the tasks use (computed while sampling; unused pool scenes are not built)
    atomic_write_json(tmp / "scenes.json", {
        s: [r.to_json() | ({"fingerprint": scene_fingerprint(r.scene_id)} if r.scene_id in used else {})
            for r in refs] for s, refs in pools.items()})
    timings["total"] = round(time.perf_counter() - t_start, 3)
    manifest = {
        "generator": GENERATOR_VERSION,
        "seed": cfg.seed,
        "tiny": cfg.tiny,
        "sizes": cfg.sizes,
        "scenes_per_split_per_family": cfg.scenes_per_split,
        "path_ranges": {k: list(v) for k, v in PATH_RANGES.items()},
        "seg_rules": {k: list(v) for k, v in SEG_RULES.items()},
        "seg_render": {"width": SEG_SIZE[0], "height": SEG_SIZE[1], "fov_deg": FOV_DEG,
                       "min_pixels": SEG_MIN_PIXELS},
        "house_generator_version": _house_generator_version(),
        "budgets": {"single": 30, "multi": 40},
        "optimal_steps": "oracle BFS actions under the task's mode, including the final Stop",
        "counts": counts,
        "timings_s": timings,
        # what the bench's content is: checked on load, so an edited, truncated or swapped file is an error
        "files": bench_file_hashes(tmp),
    }
    atomic_write_json(tmp / "bench.json", manifest)
    _swap_into_place(tmp, out)
    return manifest


def bench_file_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of ``scenes.json`` and every ``tasks/*.json`` of a bench folder, by relative path."""
    import hashlib

    paths = [root / "scenes.json", *sorted((root / "tasks").glob("*.json"))]
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _house_generator_version() -> int:
    from spatialrl.worlds.houses import GENERATOR_VERSION as HOUSES_VERSION

    return HOUSES_VERSION


def _swap_into_place(tmp: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    if old.exists():
        shutil.rmtree(old)


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                 TimeRemainingColumn())
    p.start()
    return p, p.add_task("tvr bench", total=total)
