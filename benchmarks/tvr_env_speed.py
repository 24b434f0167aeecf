"""TVR env speed: steps/s with rendering at 640x360, frame cache off and warm; bench generation time.

    python benchmarks/tvr_env_speed.py [--steps-off 300] [--steps-warm 5000] [--fraction 0.1 | --full]

Prints a table and writes benchmarks/results/tvr_env_speed-<machine>.json.

* Actions are random *valid* non-Stop answers ("Action: X" drawn from ``info["valid_actions"]``), so
  episodes end by budget (30/40 steps) and resets (two frames: start and target) are part of the rate.
* "cache off" = ``cache_mb=0``: every observation is rendered. "cache warm" replays the identical
  trajectories a second time with a cache large enough to hold them, so every frame is a hit: what is
  left is the env's own work (parsing, move rule, oracle look-up, rewards, info).
* The full default benchmark (500 eval + 1,600 SFT + 4,800 RL + 2x100 diagnostic tasks over 240 scenes)
  takes minutes here, so by default a 1/10 fraction is generated (every size and scene count x0.1, the
  same tasks per scene) and the total is extrapolated linearly; ``--full`` measures the real thing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from common import git_commit, machine  # noqa: E402  (benchmarks/ is on sys.path)

from spatialrl.envs.tvr.bench import DEFAULT_SCENES, DEFAULT_SIZES, BenchConfig, make_bench
from spatialrl.envs.tvr.env import TVREnv
from spatialrl.envs.tvr.scenes import render_service
from spatialrl.envs.tvr.tasks import Bench, task_poses

W, H = 640, 360




def random_walk(env: TVREnv, task_ids: list[str], n_steps: int, seed: int) -> float:
    """Steps/s of ``n_steps`` random valid non-Stop answers, cycling through ``task_ids``."""
    rng = np.random.default_rng(seed)
    k = 0
    t0 = time.perf_counter()
    obs, info = env.reset(options={"task_id": task_ids[0]})
    for _ in range(n_steps):
        valid = info["valid_actions"][:-1]
        obs, reward, term, trunc, info = env.step("Action: " + valid[int(rng.integers(len(valid)))])
        if term or trunc:
            k += 1
            obs, info = env.reset(options={"task_id": task_ids[k % len(task_ids)]})
    return n_steps / (time.perf_counter() - t0)


def _worker(args: tuple[str, list[str], int, int]) -> tuple[int, float, float]:
    """One process: its own env (own GL context), a warm-up, then a timed cache-off random walk."""
    bench_dir, ids, n_steps, seed = args
    env = TVREnv(bench=bench_dir, split="eval", width=W, height=H, cache_mb=0)
    random_walk(env, ids, 30, seed=seed + 1000)
    t0 = time.time()
    random_walk(env, ids, n_steps, seed=seed)
    return n_steps, t0, time.time()


def parallel_walk(bench_dir: Path, ids: list[str], workers: int, n_steps: int) -> float:
    """Aggregate cache-off steps/s of ``workers`` env processes stepping at the same time (a vector env
    of independent processes, as a batched rollout uses them)."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_worker, [(str(bench_dir), ids, n_steps, i) for i in range(workers)])
    start, end = max(p[1] for p in parts), min(p[2] for p in parts)
    if end <= start:
        raise RuntimeError("the worker processes did not run at the same time; raise --steps-off")
    return sum(p[0] / (p[2] - p[1]) for p in parts)  # every worker's rate, measured while all ran


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-off", type=int, default=300, help="steps measured with the cache off")
    ap.add_argument("--steps-warm", type=int, default=5000, help="steps measured with a warm cache")
    ap.add_argument("--fraction", type=float, default=0.1, help="fraction of the default bench to generate")
    ap.add_argument("--full", action="store_true", help="generate the full default bench instead")
    ap.add_argument("--workers", type=int, nargs="*", default=[],
                    help="also measure cache-off steps/s with N env processes in parallel (e.g. 4 8 16)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"), help="results folder")
    args = ap.parse_args()
    rows: list[dict] = []

    def add(name: str, unit: str, value: float) -> None:
        rows.append({"measurement": name, "unit": unit, "value": value})
        print(f"  {name}: {value:.1f} {unit}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        # ---- bench generation --------------------------------------------------------------------
        frac = 1.0 if args.full else args.fraction
        sizes = {k: max(1, round(v * frac)) for k, v in DEFAULT_SIZES.items()}
        scenes = {k: max(1, round(v * frac)) for k, v in DEFAULT_SCENES.items()}
        bench_dir = Path(tmp) / "bench"
        t0 = time.perf_counter()
        manifest = make_bench(bench_dir, BenchConfig.preset(seed=0, sizes=sizes, scenes=scenes), progress=True)
        seconds = time.perf_counter() - t0
        n_tasks = sum(sum(c.values()) for c in manifest["counts"].values())
        label = "full default" if args.full else f"{frac:g} fraction"
        add(f"bench generation, {label} ({n_tasks} tasks, {2 * sum(scenes.values())} scenes)", "s", seconds)
        add("bench generation rate", "tasks/s", n_tasks / seconds)
        if not args.full:
            add("full default bench (6,900 tasks, 240 scenes), extrapolated linearly", "s", seconds / frac)

        # ---- env speed ---------------------------------------------------------------------------
        bench = Bench(bench_dir)
        tasks = bench.tasks("eval")
        ids = [t["task_id"] for t in tasks]
        service = render_service(W, H, cache_mb=0)
        sample = tasks[:20]
        poses = [task_poses(t)[0] for t in sample]
        for t in {t["scene"]: t for t in sample}.values():  # upload every scene before timing
            service.render_raw(t["scene"], [task_poses(t)[1]])
        t0 = time.perf_counter()
        for t, p in zip(sample, poses, strict=True):
            service.render_raw(t["scene"], [p])
        add(f"raw render {W}x{H}, one frame per call", "frames/s", len(poses) / (time.perf_counter() - t0))

        env_off = TVREnv(bench=bench_dir, split="eval", width=W, height=H, cache_mb=0)
        random_walk(env_off, ids, 30, seed=99)  # upload the scenes, compile shaders
        add(f"env step {W}x{H}, cache off", "steps/s", random_walk(env_off, ids, args.steps_off, seed=1))

        frame_mb = W * H * 3 / 2**20
        env_warm = TVREnv(bench=bench_dir, split="eval", width=W, height=H,
                          cache_mb=frame_mb * (args.steps_warm + 2 * len(ids) + 100))
        random_walk(env_warm, ids, args.steps_warm, seed=2)  # fill the cache
        hits0, misses0 = env_warm.renderer.hits, env_warm.renderer.misses
        add(f"env step {W}x{H}, cache warm", "steps/s", random_walk(env_warm, ids, args.steps_warm, seed=2))
        assert env_warm.renderer.misses == misses0, "warm pass rendered frames: cache too small"
        add("warm pass frame-cache hits", "hits", env_warm.renderer.hits - hits0)
        for n in args.workers:
            add(f"env step {W}x{H}, cache off, {n} processes (aggregate)", "steps/s",
                parallel_walk(bench_dir, ids, n, args.steps_off))

    width = max(len(r["measurement"]) for r in rows)
    print(f"\n{'measurement':<{width}}  {'value':>10}  unit")
    for r in rows:
        print(f"{r['measurement']:<{width}}  {r['value']:>10.1f}  {r['unit']}")
    commit = git_commit()
    result = {
        "benchmark": "tvr_env_speed",
        "machine": machine(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": commit,
        "load_average_1m_at_end": os.getloadavg()[0],
        "image_size": [W, H],
        "bench": {"fraction": 1.0 if args.full else args.fraction, "sizes": sizes, "scenes_per_family": scenes},
        "rows": rows,
    }
    out = Path(args.out) / f"tvr_env_speed-{platform.node() or 'machine'}.json"
    from spatialrl.io import atomic_write_json

    atomic_write_json(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
