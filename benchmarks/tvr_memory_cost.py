"""Why visual-action (VA) memory is slow: every turn re-sends the whole conversation, so the vision
tower re-encodes every earlier frame (no cache across turns) and the prompt grows each turn.

Evaluates a built-in TVR model with action-only (AO) and VA memory on the same episodes of a bench,
without caches, with the per-image vision cache (``agents/vision_cache.py``), and with the vision cache
and the prefix KV cache (``models/conversation_kv.py``: a turn prefills only what its conversation
added since its last answer), timing the vision tower inside generate (a wrapper around its forward),
side by side:

    python benchmarks/tvr_memory_cost.py --bench runs/gpu-inputs/tvr-bench --episodes 4

Prints per memory and cache setting: wall time, vision-tower time and share, images encoded vs frames
the episodes saw, prompt tokens prefilled vs served from the prefix cache, and whether the run's
answers equal the uncached run's (the episode records, byte for byte).
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

from common import git_commit, machine

HERE = Path(__file__).resolve().parent


def run(memory: str, cache_mb: int, prefix_mb: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    from spatialrl.agents.base import SamplingParams
    from spatialrl.agents.loader import load_policy
    from spatialrl.eval.evaluate import evaluate

    policy = load_policy(f"builtin:tvr-{memory}-sft", vision_cache_mb=cache_mb, prefix_cache_mb=prefix_mb)
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
                           "width": 280, "height": 168}, work / f"{memory}-{cache_mb}-{prefix_mb}", policy=policy,
                          batch_size=args.episodes,
                          sampling=SamplingParams(max_new_tokens=32), overwrite=True, progress=False)
    wall = time.perf_counter() - t0
    steps = metrics["overall"]["mean_steps"] * metrics["overall"]["n"]
    answers = (work / f"{memory}-{cache_mb}-{prefix_mb}" / "episodes.jsonl").read_text()
    return {"memory": memory, "vision_cache_mb": cache_mb, "prefix_cache_mb": prefix_mb, "answers": answers,
            "wall_seconds": wall, "vision_seconds": acc["seconds"],
            "prompt_tokens": policy.usage["prompt_tokens"], "prefix_reused_tokens": policy.usage["prefix_reused_tokens"],
            "vision_share": acc["seconds"] / wall, "images_encoded": acc["images"],
            "env_steps": steps, "frames_seen": steps + 2 * metrics["overall"]["n"]}  # + start and target views


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", required=True, help="TVR bench folder (spatialrl tvr make-bench)")
    ap.add_argument("--episodes", type=int, default=4, help="first N episodes of the eval split, one batch")
    ap.add_argument("--cache-mb", type=int, default=1024, help="vision and prefix cache sizes of the cached rows")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/tvr_memory_cost-vm.json)")
    args = ap.parse_args()
    import torch

    from spatialrl.io import atomic_write_json

    work = Path(tempfile.mkdtemp(prefix="tvr-memory-"))
    rows = []
    for memory in ("ao", "va"):
        off = run(memory, 0, 0, args, work)
        rows.append(off)
        for prefix in (0, args.cache_mb):
            on = run(memory, args.cache_mb, prefix, args, work)
            on["same_answers_as_uncached"] = on["answers"] == off["answers"]
            on["speedup"] = off["wall_seconds"] / on["wall_seconds"]
            rows.append(on)
    for r in rows:
        r.pop("answers")
    print(f"\nTVR eval, builtin:tvr-{{ao,va}}-sft, {args.episodes} episodes, 280×168 frames, on {machine()}")
    print(f"{'memory':<7} {'vision MB':>9} {'prefix MB':>9} {'wall s':>7} {'vision s':>9} {'share':>6} "
          f"{'images encoded':>15} {'env steps':>10} {'prompt tok':>11} {'reused':>7} {'speed-up':>9} {'same answers':>13}")
    for r in rows:
        reused = r["prefix_reused_tokens"] / max(1, r["prompt_tokens"])
        print(f"{r['memory']:<7} {r['vision_cache_mb']:>9} {r['prefix_cache_mb']:>9} {r['wall_seconds']:>7.1f} "
              f"{r['vision_seconds']:>9.1f} {r['vision_share']:>6.0%} {r['images_encoded']:>15,} {r['env_steps']:>10.0f} "
              f"{r['prompt_tokens']:>11,} {reused:>7.0%} {r.get('speedup', 1.0):>8.2f}× "
              f"{str(r.get('same_answers_as_uncached', '')):>13}")
    out = Path(args.out or HERE / "results" / "tvr_memory_cost-vm.json")
    atomic_write_json(out, {"benchmark": "tvr_memory_cost", "machine": machine(), "git_commit": git_commit(),
                            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                            "torch": torch.__version__, "args": vars(args), "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
