"""V-IRL VL env speed: expert steps/s with 2405² and 448² grids, grid cache cold vs warm.

The reference renders every observation from the panorama JPEG (4 remaps + 4 bicubic resizes), twice
per correct step. Here "cold" is the env with its grid cache switched off (one render per step),
"warm" replays the same episodes once the cache holds their grids (training revisits the same rail
points: only the start heading is random). Target: warm ≥ 20× cold.

    python benchmarks/virl_pixels_speed.py [--pano-width 2048] [--steps 40]

Prints a table and writes benchmarks/results/virl_pixels_speed-<machine>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import tempfile
import time
from pathlib import Path

from common import git_commit, machine  # noqa: E402  (benchmarks/ is on sys.path)

from spatialrl.envs.virl.env import VirlEnv
from spatialrl.envs.virl.pixels import GridCache
from spatialrl.envs.virl.testdata import random_routes, write_dataset


def run_steps(env: VirlEnv, n_steps: int) -> float:
    """Expert steps over consecutive reference-stream episodes; returns steps per second."""
    done, k = 0, 0
    t0 = time.perf_counter()
    while done < n_steps:
        _, info = env.reset(options={"stream": {"seed": 12, "index": k}})
        k += 1
        term = trunc = False
        while not (term or trunc) and done < n_steps:
            _, _, term, trunc, info = env.step(info["expert_response"])
            done += 1
    return n_steps / (time.perf_counter() - t0)




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pano-width", type=int, default=2048, help="panorama width (height = width/2)")
    ap.add_argument("--steps", type=int, default=40, help="env steps per measurement")
    ap.add_argument("--routes", type=int, default=8)
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        data = write_dataset(Path(tmp) / "city", random_routes(args.routes, seed=0),
                             pano_size=(args.pano_width, args.pano_width // 2))
        print(f"dataset: {args.routes} routes, {args.pano_width}x{args.pano_width // 2} panoramas "
              f"({time.perf_counter() - t0:.1f}s to write)")
        for grid in (2405, 448):
            cold_env = VirlEnv(data, grid_size=grid, cache_mb=0)
            cold = run_steps(cold_env, args.steps)
            cache = GridCache(max_bytes=4 << 30)  # a private cache for this measurement
            warm_env = VirlEnv(data, grid_size=grid, cache=cache)
            run_steps(warm_env, args.steps)  # fill
            warm = run_steps(warm_env, args.steps)
            rows.append({"grid": grid, "cold_steps_per_s": cold, "warm_steps_per_s": warm, "speedup": warm / cold,
                         "cache_hits": cache.hits})
    print(f"\n{'grid':>6} {'cold steps/s':>13} {'warm steps/s':>13} {'warm/cold':>10}")
    for r in rows:
        print(f"{r['grid']:>6} {r['cold_steps_per_s']:>13.2f} {r['warm_steps_per_s']:>13.1f} {r['speedup']:>9.1f}x")
    print("(the reference renders twice per correct step: its cold rate is about half the cold column)")
    commit = git_commit()
    result = {
        "benchmark": "virl_pixels_speed",
        "machine": machine(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": commit,
        "pano_size": [args.pano_width, args.pano_width // 2],
        "steps_per_measurement": args.steps,
        "rows": rows,
    }
    out = Path(__file__).parent / "results" / f"virl_pixels_speed-{platform.node() or 'machine'}.json"
    from spatialrl.io import atomic_write_json

    atomic_write_json(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
