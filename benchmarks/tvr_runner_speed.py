"""TVR through the eval runner: env steps/s with the rollout core's batch path on and off (issue 21).

    python benchmarks/tvr_runner_speed.py [--size 640x360] [--batch-sizes 16 64] [--episodes 64] [--repeats 3]

``tvr_vector_speed.py`` times the envs alone; this times what an eval pays per env step, through
``run_episodes`` (prompter, records, the seeded random agent, slot refills): ``vector_env=true`` (one
``TVRVectorEnv`` for all slots, the default) against ``vector_env=false`` (one ``TVREnv`` per slot), same
episodes, frame cache off, AO memory (the prompt holds two images, so prompt building stays small). Rows
are interleaved (off, on, off, on, ...) because the 2-core VM is shared; each row is the median of
``--repeats`` runs, with the CPU ms per step (all threads) and the 1-minute load. The two runs of a
pair must write the same episodes (checked).

Writes ``benchmarks/results/tvr_runner_speed-<machine>.json``: rows ``{device, width, height, batch_size,
vector_env, steps_per_s, cpu_ms_per_step, load_1m}``, machine, date, commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import git_commit, machine, write_results  # noqa: E402  (benchmarks/ is on sys.path)

from spatialrl.agents.random import RandomPolicy
from spatialrl.envs.registry import get_suite
from spatialrl.envs.tvr.bench import BenchConfig, make_bench
from spatialrl.rollout.runner import run_episodes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="640x360", help="image size WxH")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64], help="runner batch sizes (slots)")
    ap.add_argument("--episodes", type=int, default=64, help="eval episodes per run")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repetitions per row (median reported)")
    ap.add_argument("--scenes", type=int, default=4, help="eval scenes per family (single- and multi-room)")
    ap.add_argument("--tag", default="", help="suffix of the results file name")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"), help="results folder")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    suite = get_suite("tvr")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "bench"
        make_bench(bench, BenchConfig.preset(seed=0, sizes={"eval": args.episodes, "sft": 0, "rl": 0, "diag_rotate": 0,
                                                            "diag_move": 0},
                                             scenes={"eval": args.scenes, "sft": 0, "rl": 0}), progress=False)
        base = {"data": str(bench), "width": w, "height": h, "cache_mb": 0, "memory": "ao"}
        episodes = suite.episodes(base)
        run_episodes(suite, base, RandomPolicy(0), episodes[:2], batch_size=2, progress=False)  # houses built
        from spatialrl.envs.tvr.scenes import render_service

        device = render_service(w, h, cache_mb=0).backend.renderer.device_name
        for b in args.batch_sizes:
            samples: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
            for rep in range(args.repeats):
                records = {}
                for on in (False, True):
                    options = {**base, "vector_env": on}
                    t0, c0 = time.perf_counter(), time.process_time()
                    res = run_episodes(suite, options, RandomPolicy(rep), episodes, batch_size=b, progress=False,
                                       out_dir=Path(tmp) / f"run-{b}-{rep}-{on}")
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                    records[on] = (Path(tmp) / f"run-{b}-{rep}-{on}" / "episodes.jsonl").read_bytes()
                    samples[on].append((res.env_steps / wall, 1000 * cpu / res.env_steps, os.getloadavg()[0],
                                        res.env_steps))
                if records[False] != records[True]:
                    raise SystemExit(f"batch {b}: the runs with vector_env on and off wrote different episodes")
            for on in (False, True):
                s = samples[on]
                row = {"device": device, "width": w, "height": h, "batch_size": b, "vector_env": on,
                       "steps_per_s": float(np.median([x[0] for x in s])),
                       "samples_steps_per_s": [x[0] for x in s],
                       "cpu_ms_per_step": float(np.median([x[1] for x in s])),
                       "load_1m": float(np.median([x[2] for x in s])), "env_steps": int(s[0][3])}
                rows.append(row)
                print(f"  {w}x{h} B={b:<3} vector_env={str(on).lower():<5} {row['steps_per_s']:7.1f} steps/s (median of "
                      f"{', '.join(f'{x[0]:.0f}' for x in s)})  {row['cpu_ms_per_step']:5.2f} CPU ms/step  "
                      f"load {row['load_1m']:.1f}", flush=True)
    result = {"benchmark": "tvr_runner_speed", "machine": machine(),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "git_commit": git_commit(),
              "device": device, "cache": "off", "agent": "random", "memory": "ao",
              "episodes_per_run": len(episodes), "rows": rows}
    write_results(args.out, "tvr_runner_speed", args.tag, result)


if __name__ == "__main__":
    main()
