"""TVR vector env speed: one ``TVREnv`` vs ``TVRVectorEnv`` of N envs, side by side in one run (issue 21).

    python benchmarks/tvr_vector_speed.py [--sizes 640x360 280x168] [--num-envs 1 4 16 64 256] [--steps 1000]
        [--readback sync pbo pbo_rgb] [--env-workers 1 2 4]

Cache off (``cache_mb=0``: every observation rendered), random valid non-Stop answers, so episodes end by
budget and resets (start + target frame) are part of the rate, as in ``tvr_env_speed.py``. Both envs draw
their tasks at random from the same pool (single- and multi-room houses cost differently per frame, so
``--steps`` should cover many episodes); the vector env autoresets (next step).
``--readback`` lists the renderer's readback modes to measure for every vector row (``sync``: wait for each
chunk of frames; ``pbo``: asynchronous pixel-buffer readback overlapping the next chunk's draws; ``pbo_rgb``:
the same with the GL packing RGB, so the host copies instead of converting), side by side.
``--env-workers`` lists worker-process counts k to measure for every vector row: k = 1 is one
``TVRVectorEnv`` in this process (as before); k > 1 a ``ShardedVectorEnv`` of min(k, N) near-equal shards,
each a ``TVRVectorEnv`` in its own process rendering into the shared observation array (shards and the
sharded env with ``copy=False``, the rollout core's setting: no frame is copied after the GL wrote it);
its CPU ms per step count the workers' CPU time too, and ``parent_cpu_ms_per_step`` is this process's
alone (the part that does not spread over the workers).
``steps_per_s`` counts env steps (a vector step of N envs is N steps). The 2-core VM is shared with other
jobs, so every row is measured ``--repeats`` times, interleaved (single, N=1, N=4, ... then again), and
the row holds the median with every sample and the best; beside the wall-clock rate it holds CPU ms per
step (all threads of this process, llvmpipe's included), ``cores_used`` = CPU seconds per wall second (how
much of the 2 cores the env kept busy; llvmpipe spreads even one frame over its rasterizer threads) and the 1-minute load average.

Writes ``benchmarks/results/tvr_vector_speed-<machine>.json``: rows ``{device, width, height, num_envs,
steps_per_s, env, readback, workers, cpu_ms_per_step, parent_cpu_ms_per_step, load_1m}`` (the single env's readback is always ``sync``), machine, date, commit, and the host memory of the vector
env's frame buffers per 1,000 envs, and the GL memory of each process's renderer (``gl_memory_per_process``:
render targets, sized by the chunk of frames drawn at once, plus the uploaded scenes; neither grows with N).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import git_commit, machine, write_results  # noqa: E402  (benchmarks/ is on sys.path)

from spatialrl.envs.tvr.bench import BenchConfig, make_bench
from spatialrl.envs.tvr.env import TVREnv
from spatialrl.envs.tvr.tasks import Bench
from spatialrl.envs.tvr.vector import TVRVectorEnv


def single_rate(bench_dir: Path, w: int, h: int, ids: list[str], n_steps: int, seed: int) -> tuple[float, float, float]:
    """(steps/s, CPU ms/step, the same) of one TVREnv, cache off, after a warm-up pass over every task."""
    env = TVREnv(bench=bench_dir, split="eval", width=w, height=h, cache_mb=0)
    for tid in ids:  # upload every scene, compile shaders
        env.reset(options={"task_id": tid})
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)  # then tasks are drawn from the pool, as the vector env's are
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n_steps):
        valid = info["valid_actions"][:-1]
        obs, reward, term, trunc, info = env.step("Action: " + valid[int(rng.integers(len(valid)))])
        if term or trunc:
            obs, info = env.reset()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    return n_steps / wall, 1000 * cpu / n_steps, 1000 * cpu / n_steps


def process_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far (Linux ``/proc``)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / os.sysconf("SC_CLK_TCK")


def vector_rate(bench_dir: Path, w: int, h: int, n: int, n_steps: int, seed: int,
                readback: str = "sync", workers: int = 1) -> tuple[float, float, float]:
    """(env steps/s, CPU ms/env step, this process's CPU ms/env step) of a TVRVectorEnv of ``n`` envs, cache
    off, after a warm-up; with ``workers`` > 1 a ShardedVectorEnv over that many processes (their CPU time
    counted in the second number: the third is the parent's alone, the part that does not spread)."""
    if workers > 1:
        from spatialrl.envs.sharded import ShardedVectorEnv, even_sizes

        shard = functools.partial(TVRVectorEnv, bench=bench_dir, split="eval", width=w, height=h, cache_mb=0,
                                  readback=readback, copy=False)
        env = ShardedVectorEnv(shard, even_sizes(n, workers), copy=False)
        pids = env.pids
    else:
        env = TVRVectorEnv(n, bench=bench_dir, split="eval", width=w, height=h, cache_mb=0, readback=readback)
        pids = []
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)

    def actions() -> list[str]:
        return ["Action: " + v[int(rng.integers(len(v) - 1))] for v in infos["valid_actions"]]

    for _ in range(3):  # warm-up: framebuffers for the batch, every scene uploaded
        obs, rew, term, trunc, infos = env.step(actions())
    vec_steps = max(4, math.ceil(n_steps / n))
    t0, p0, w0 = time.perf_counter(), time.process_time(), process_cpu_s(pids)
    for _ in range(vec_steps):
        obs, rew, term, trunc, infos = env.step(actions())
    wall, parent = time.perf_counter() - t0, time.process_time() - p0
    cpu = parent + process_cpu_s(pids) - w0
    env.close()
    steps = vec_steps * n
    return steps / wall, 1000 * cpu / steps, 1000 * parent / steps


def profile_row(bench_dir: Path, w: int, h: int, n: int, n_steps: int, out: Path, tag: str, device: str,
                readback: str = "sync") -> None:
    """Where a vector row's host time goes (issue 21: on the H200 every step cost 1.4 CPU ms at 640x360
    and the GPU waited): cProfile of ``vector_rate``, the top functions by own time, as text."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    rate, cpu_ms, _ = prof.runcall(vector_rate, bench_dir, w, h, n, n_steps, 3, readback)
    text = io.StringIO()
    text.write(f"tvr_vector_speed --profile: {w}x{h} N={n}, readback {readback}, {device}, {machine()}, commit {git_commit()}, "
               f"{dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}\n"
               f"under cProfile: {rate:.0f} env steps/s, {cpu_ms:.2f} CPU ms/step (setup and warm-up included below)\n")
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(40)
    out.mkdir(parents=True, exist_ok=True)
    name = "tvr_vector_profile-" + ("llvmpipe" if "llvmpipe" in device else "gpu") + (f"-{tag}" if tag else "") + ".txt"
    (out / name).write_text(text.getvalue())
    print(f"profile: {out / name}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["640x360", "280x168"], help="image sizes WxH")
    ap.add_argument("--num-envs", type=int, nargs="+", default=[1, 4, 16, 64, 256], help="vector env sizes N")
    ap.add_argument("--steps", type=int, default=1000, help="env steps measured per row (at least 4 vector steps)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repetitions per row (median reported)")
    ap.add_argument("--scenes", type=int, default=4, help="eval scenes per family (single- and multi-room)")
    ap.add_argument("--readback", nargs="+", default=["sync"], choices=["sync", "pbo", "pbo_rgb"],
                    help="renderer readback modes measured for every vector row, side by side (--profile uses the first)")
    ap.add_argument("--env-workers", type=int, nargs="+", default=[1], metavar="K",
                    help="worker processes per vector row: 1 = one TVRVectorEnv in this process, K > 1 = a "
                         "ShardedVectorEnv of min(K, N) shards (rows side by side)")
    ap.add_argument("--tag", default="", help="suffix of the results file name (e.g. quiet)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also run the vector env of N envs at the first size under cProfile (after the rows) and "
                         "write where the host time goes: the 40 costliest functions by own time "
                         "(results/tvr_vector_profile-<machine><tag>.txt)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"), help="results folder")
    args = ap.parse_args()
    if any(k < 1 for k in args.env_workers):
        ap.error(f"--env-workers must be >= 1, got {args.env_workers}")
    sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        bench_dir = Path(tmp) / "bench"
        n_tasks = 8 * args.scenes
        cfg = BenchConfig.preset(seed=0, sizes={"eval": n_tasks, "sft": 0, "rl": 0, "diag_rotate": 0, "diag_move": 0},
                                 scenes={"eval": args.scenes, "sft": 0, "rl": 0})
        t0 = time.perf_counter()
        make_bench(bench_dir, cfg, progress=False)
        print(f"bench: {n_tasks} eval tasks over {2 * args.scenes} houses in {time.perf_counter() - t0:.0f} s",
              flush=True)
        ids = [t["task_id"] for t in Bench(bench_dir).tasks("eval")]
        from spatialrl.envs.tvr.scenes import render_service

        device = render_service(*sizes[0], cache_mb=0).backend.renderer.device_name

        def measure(env: str, w: int, h: int, n: int, readback: str, workers: int) -> tuple[float, float, float]:
            if env == "single":
                return single_rate(bench_dir, w, h, ids, args.steps, seed=1)
            return vector_rate(bench_dir, w, h, n, args.steps, seed=2, readback=readback, workers=workers)

        # (env, N, readback, workers): never more workers than envs, so k > N runs as k = N (duplicates dropped)
        workers = sorted(set(args.env_workers))
        gl_memory: dict[str, dict[str, float]] = {}
        for w, h in sizes:
            configs = [("single", 1, "sync", 1)] + list(dict.fromkeys(
                ("vector", n, mode, min(k, n)) for n in args.num_envs for mode in args.readback for k in workers))
            samples: dict[tuple[str, int, str, int], list[tuple[float, ...]]] = {c: [] for c in configs}
            for _ in range(args.repeats):
                for env, n, mode, k in configs:
                    rate, cpu_ms, parent_ms = measure(env, w, h, n, mode, k)
                    samples[(env, n, mode, k)].append((rate, cpu_ms, os.getloadavg()[0], parent_ms))
            for env, n, mode, k in configs:
                got = samples[(env, n, mode, k)]
                rates = [x[0] for x in got]
                row = {"device": device, "width": w, "height": h, "num_envs": n, "steps_per_s": float(np.median(rates)),
                       "env": env, "readback": mode, "workers": k,
                       "cpu_ms_per_step": float(np.median([x[1] for x in got])),
                       "parent_cpu_ms_per_step": float(np.median([x[3] for x in got])),
                       "load_1m": float(np.median([x[2] for x in got])), "samples_steps_per_s": rates,
                       "best_steps_per_s": max(rates),
                       "cores_used": float(np.median([x[0] * x[1] / 1000 for x in got]))}
                rows.append(row)
                print(f"  {w}x{h} {env:<6} N={n:<4} {mode:<7} k={k:<2} {row['steps_per_s']:8.1f} steps/s (median of "
                      f"{', '.join(f'{r:.0f}' for r in rates)})  {row['cpu_ms_per_step']:6.2f} CPU ms/step "
                      f"({row['parent_cpu_ms_per_step']:.2f} in this process)  "
                      f"{row['cores_used']:.2f} cores  "
                      f"load {row['load_1m']:.1f}", flush=True)
            # GL memory of this process's renderer at this size after its rows (the worker processes of
            # k > 1 rows each hold their own): render targets sized by the chunk of frames, and the scenes
            gl = render_service(w, h, cache_mb=0).backend.renderer.gpu_bytes()
            gl_memory[f"{w}x{h}"] = {"targets_mib": gl["targets"] / 2**20, "scenes_mib": gl["scenes"] / 2**20,
                                     "scenes": gl["scene_count"]}
            print(f"  {w}x{h} GL memory: render targets {gl['targets'] / 2**20:.0f} MiB, {gl['scene_count']} scenes "
                  f"{gl['scenes'] / 2**20:.0f} MiB (neither grows with N)", flush=True)
        if args.profile:
            profile_row(bench_dir, *sizes[0], args.profile, args.steps, Path(args.out), args.tag, device,
                        args.readback[0])
    result = {
        "benchmark": "tvr_vector_speed",
        "machine": machine(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "device": device,
        "cache": "off",
        "readback_modes": args.readback,
        "env_workers": workers,
        "bench": {"eval_tasks": len(ids), "houses": 2 * args.scenes},
        "vector_buffers_mb_per_1000_envs": {f"{w}x{h}": 2 * w * h * 3 * 1000 / 2**20 for w, h in sizes},
        # GPU side, per process: counted from the GL objects' sizes (Renderer.gpu_bytes), independent of N
        "gl_memory_per_process": gl_memory,
        "rows": rows,
    }
    write_results(args.out, "tvr_vector_speed", args.tag, result)


if __name__ == "__main__":
    main()
