"""GeneralPoints env speed: solver, deal, table rendering, verification, whole expert episodes.

    python benchmarks/gp_env_speed.py [--hands 200]

Prints a table and writes benchmarks/results/gp_env_speed-<machine>.json. "cold" means empty solver
and card-face caches (a fresh process); "warm" repeats the same hands.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import time
from pathlib import Path

import numpy as np
from common import git_commit, machine  # noqa: E402  (benchmarks/ is on sys.path)

from spatialrl.agents.expert import ExpertPolicy
from spatialrl.envs.gp.card_images import render_card
from spatialrl.envs.gp.env import GeneralPointsEnv
from spatialrl.envs.gp.solver import _solutions_sorted, _solvable, is_solvable, solutions
from spatialrl.envs.registry import get_suite
from spatialrl.rollout.runner import run_episodes


def clear_caches() -> None:
    _solutions_sorted.cache_clear()
    _solvable.cache_clear()
    render_card.cache_clear()


def rate(n: int, fn) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hands", type=int, default=200, help="hands per measurement")
    args = ap.parse_args()
    n = args.hands
    rng = np.random.default_rng(0)
    multisets = [tuple(int(x) for x in rng.integers(1, 14, size=4)) for _ in range(n)]
    rows: list[dict] = []

    def add(name: str, unit: str, value: float) -> None:
        rows.append({"measurement": name, "unit": unit, "value": value})

    clear_caches()
    add("solutions() cold, random 1..13 hands", "hands/s", rate(n, lambda: [solutions(m) for m in multisets]))
    clear_caches()
    add("is_solvable() cold, same hands", "hands/s", rate(n, lambda: [is_solvable(m) for m in multisets]))

    env_l = GeneralPointsEnv(mode="l")
    clear_caches()
    add("reset L mode, cold (deal+redeal+solve)", "resets/s", rate(n, lambda: [env_l.reset(seed=s) for s in range(n)]))
    add("reset L mode, warm", "resets/s", rate(n, lambda: [env_l.reset(seed=s) for s in range(n)]))
    for res in (1200, 448):
        env_vl = GeneralPointsEnv(mode="vl", resolution=res)
        [env_vl.reset(seed=s) for s in range(n)]  # warm solver and card faces
        add(f"reset VL mode {res}px, warm", "resets/s", rate(n, lambda e=env_vl: [e.reset(seed=s) for s in range(n)]))

    _, info = env_l.reset(seed=0, options={"verify_iter": 10**9})
    answers = info["candidate_responses"] + ['{"formula": "(1+2"}', "no json at all", '"formula": "1 + 2"']

    def steps() -> None:
        for i in range(n * 8):
            if env_l.step(answers[i % len(answers)])[2]:  # a lucky candidate solved it: same hand again
                env_l.reset(seed=0, options={"verify_iter": 10**9})

    add("step (parse+verify+candidates) L mode", "steps/s", rate(n * 8, steps))

    suite = get_suite("gp")
    for res in (1200, 448):
        options = {"split": "all", "episodes": max(1, n // 4), "resolution": res}
        specs = suite.episodes(options)
        add(f"expert episodes via runner, VL {res}px, all splits", "episodes/s",
            rate(len(specs), lambda o=options, sp=specs: run_episodes(suite, o, ExpertPolicy(), sp, progress=False)))

    width = max(len(r["measurement"]) for r in rows)
    print(f"{'measurement':<{width}}  {'value':>10}  unit")
    for r in rows:
        print(f"{r['measurement']:<{width}}  {r['value']:>10.1f}  {r['unit']}")
    commit = git_commit()
    result = {
        "benchmark": "gp_env_speed",
        "machine": machine(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": commit,
        "hands": n,
        "rows": rows,
    }
    out = Path(__file__).parent / "results" / f"gp_env_speed-{platform.node() or 'machine'}.json"
    from spatialrl.io import atomic_write_json

    atomic_write_json(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
