"""Why visual-action (VA) memory is slow: every turn re-sends the whole conversation, so the vision
tower re-encodes every earlier frame (no cache across turns) and the prompt grows each turn.

Evaluates a built-in TVR model with action-only (AO) and VA memory on the same episodes of a bench and
times the vision tower inside generate (a wrapper around its forward), side by side:

    python benchmarks/tvr_memory_cost.py --bench runs/gpu-inputs/tvr-bench --episodes 4

Prints per memory: wall time, vision-tower time and share, images encoded vs frames the episodes saw.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

from common import git_commit, machine

HERE = Path(__file__).resolve().parent


def run(memory: str, args: argparse.Namespace, work: Path) -> dict[str, float]:
    from spatialrl.agents.base import SamplingParams
    from spatialrl.agents.loader import load_policy
    from spatialrl.eval.evaluate import evaluate

    policy = load_policy(f"builtin:tvr-{memory}-sft")
    inner = getattr(policy.model, "model", policy.model)
    visual = getattr(policy.model, "visual", None) or inner.visual
    acc = {"seconds": 0.0, "images": 0}
    forward = visual.forward

    def timed(*a, **k):
        t = time.perf_counter()
        out = forward(*a, **k)
        acc["seconds"] += time.perf_counter() - t
        grid = k.get("grid_thw", a[1] if len(a) > 1 else None)
        acc["images"] += 0 if grid is None else int(grid.shape[0])
        return out

    visual.forward = timed
    t0 = time.perf_counter()
    _, metrics = evaluate("tvr", f"builtin:tvr-{memory}-sft",
                          {"data": args.bench, "split": "eval", "limit": args.episodes, "memory": memory,
                           "width": 280, "height": 168}, work / memory, policy=policy, batch_size=args.episodes,
                          sampling=SamplingParams(max_new_tokens=32), overwrite=True, progress=False)
    wall = time.perf_counter() - t0
    steps = metrics["overall"]["mean_steps"] * metrics["overall"]["n"]
    return {"memory": memory, "wall_seconds": wall, "vision_seconds": acc["seconds"],
            "vision_share": acc["seconds"] / wall, "images_encoded": acc["images"],
            "env_steps": steps, "frames_seen": steps + 2 * metrics["overall"]["n"]}  # + start and target views


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", required=True, help="TVR bench folder (spatialrl tvr make-bench)")
    ap.add_argument("--episodes", type=int, default=4, help="first N episodes of the eval split, one batch")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/tvr_memory_cost-vm.json)")
    args = ap.parse_args()
    import torch

    from spatialrl.io import atomic_write_json

    work = Path(tempfile.mkdtemp(prefix="tvr-memory-"))
    rows = [run(m, args, work) for m in ("ao", "va")]
    print(f"\nTVR eval, builtin:tvr-{{ao,va}}-sft, {args.episodes} episodes, 280×168 frames, on {machine()}")
    print(f"{'memory':<7} {'wall s':>7} {'vision s':>9} {'share':>6} {'images encoded':>15} {'env steps':>10}")
    for r in rows:
        print(f"{r['memory']:<7} {r['wall_seconds']:>7.1f} {r['vision_seconds']:>9.1f} {r['vision_share']:>6.0%} "
              f"{r['images_encoded']:>15,} {r['env_steps']:>10.0f}")
    out = Path(args.out or HERE / "results" / "tvr_memory_cost-vm.json")
    atomic_write_json(out, {"benchmark": "tvr_memory_cost", "machine": machine(), "git_commit": git_commit(),
                            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                            "torch": torch.__version__, "args": vars(args), "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
