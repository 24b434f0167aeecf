"""How much a policy explores when it samples: sampled evaluations beside a greedy one on the same episodes.

PPO learns only from rollouts that differ; a sharply fine-tuned policy sampled at the recipe's temperature
may retrace its greedy path. Given a greedy `spatialrl eval` folder and sampled ones of the same agent,
task, data and episodes (`--temperature T --seed S`; the episode stream does not depend on the sampling
seed, which is checked), this prints per temperature: success, per-step accuracy, the episodes whose
sampled path leaves the greedy one, and the rate of first divergences per step walked on the shared
path (the states are equal until the first differing action, so that is a per-state exploration rate).
Results: benchmarks/results/sampling_exploration-<host>[-<tag>].json (machine, date, commit, rows).

    spatialrl eval --task virl --agent builtin:virl-sft --data CITY --split in-dist --set episodes=60 \\
        --set grid_size=224 --set intersection_in_text=false --out ev-t0 --no-report
    spatialrl eval ... --temperature 1.0 --seed 1 --out ev-t1.0 --no-report
    python benchmarks/sampling_exploration.py --greedy ev-t0 --sampled ev-t0.2 ev-t1.0 --tag virl-val
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from common import git_commit, machine, write_results

ACTION = re.compile(r'"action"\s*:\s*"([^"]*)"')


def action_of(response: str | None) -> str:
    """The answer's action field (V-IRL JSON, TVR `Action: ...`), else the answer's stripped text."""
    text = response or ""
    m = ACTION.search(text)
    if m:
        return m.group(1)
    m = re.search(r"Action:\s*(\S+)", text)
    return m.group(1) if m else text.strip()


def load(folder: Path) -> tuple[dict, dict, dict]:
    """(episodes by id, their steps in order, run.json) of one eval folder."""
    episodes = {e["episode_id"]: e for e in map(json.loads, (folder / "episodes.jsonl").read_text().splitlines())}
    steps: dict[str, list] = defaultdict(list)
    for s in map(json.loads, (folder / "steps.jsonl").read_text().splitlines()):
        steps[s["episode_id"]].append(s)
    for k in steps:
        steps[k].sort(key=lambda s: s["t"])
    return episodes, steps, json.loads((folder / "run.json").read_text())


def compare(greedy: tuple, sampled: tuple, name: str) -> dict:
    g_eps, g_steps, _ = greedy
    eps, steps, run = sampled
    if set(eps) != set(g_eps):
        raise SystemExit(f"{name}: not the greedy run's episodes ({len(eps)} vs {len(g_eps)} ids)")
    starts = ("route_idx", "start_heading", "stream")
    moved = [k for k in eps if any(eps[k].get(f) != g_eps[k].get(f) for f in starts)]
    if moved:
        raise SystemExit(f"{name}: episode {moved[0]} starts elsewhere than in the greedy run")
    walked = left = 0
    for k in eps:
        for a, b in zip(g_steps[k], steps[k], strict=False):
            walked += 1
            if action_of(a["response"]) != action_of(b["response"]):
                left += 1
                break
    n_steps = sum(e["n_steps"] for e in eps.values())
    return {"run": name, "temperature": (run.get("sampling") or {}).get("temperature", run.get("temperature")),
            "episodes": len(eps), "success": sum(bool(e["success"]) for e in eps.values()) / len(eps),
            "per_step_accuracy": sum(e.get("n_correct", 0) for e in eps.values()) / max(1, n_steps),
            "episodes_leaving_greedy_path": left, "shared_steps": walked,
            "first_divergence_rate": left / max(1, walked)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--greedy", type=Path, required=True, help="eval folder of the greedy run")
    ap.add_argument("--sampled", type=Path, nargs="+", required=True, help="eval folders of sampled runs")
    ap.add_argument("--out-dir", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--tag", default=None)
    ap.add_argument("--note", default="", help="how the eval folders were made (recorded in the results)")
    args = ap.parse_args()
    greedy = load(args.greedy)
    base = compare(greedy, greedy, str(args.greedy))
    rows = [{**base, "temperature": 0.0}] + [compare(greedy, load(f), str(f)) for f in args.sampled]
    print(f"{'run':<28} {'T':>5} {'episodes':>8} {'success':>8} {'per-step':>8} {'left greedy':>11} {'rate/step':>9}")
    for r in rows:
        t = "?" if r["temperature"] is None else f"{r['temperature']:g}"
        print(f"{Path(r['run']).name:<28} {t:>5} {r['episodes']:>8} {r['success']:>8.3f} {r['per_step_accuracy']:>8.3f} "
              f"{r['episodes_leaving_greedy_path']:>5}/{r['episodes']:<5} {r['first_divergence_rate']:>9.4f}")
    write_results(args.out_dir, "sampling_exploration", args.tag, {
        "benchmark": "sampling_exploration", "machine": machine(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(), "agent": greedy[2].get("agent"), "options": greedy[2].get("options"),
        "note": args.note, "rows": rows})


if __name__ == "__main__":
    main()
