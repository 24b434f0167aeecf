"""The TVR image probe's scoring, whole passes vs the shared prefix, on a shipped model (issue 19).

The probe (``eval/image_probe.py``) reads a model's distribution over the nine ``Action: X`` answers of
a state by teacher forcing each. Whole passes run the full prompt (two frames, ~390 tokens) nine times;
the shared-prefix path prefills the prompt once per state and runs the nine answers' tails from its KV
cache. Both on the same states, side by side:

    python benchmarks/image_probe_speed.py --states 16

Prints seconds per state for each path and the largest difference between their distributions; writes
``results/image_probe_speed-<machine>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
import time
from pathlib import Path

import torch
from common import git_commit, machine

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tvr-ao-sft", help="a shipped TVR model (builtin:NAME)")
    parser.add_argument("--states", type=int, default=16)
    parser.add_argument("--tag", default="vm")
    args = parser.parse_args()

    from transformers import AutoModelForImageTextToText

    from spatialrl.envs.tvr.bench import BenchConfig, make_bench
    from spatialrl.eval.image_probe import answer_distributions, probe_states
    from spatialrl.models.builtin import resolve_builtin
    from spatialrl.models.processor import load_processor

    folder = resolve_builtin(args.model)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    processor = load_processor(folder)
    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "bench"
        make_bench(bench, BenchConfig.preset(seed=0, sizes={"eval": 40, "sft": 0, "rl": 0, "diag_rotate": 0,
                                                             "diag_move": 0}), progress=False)
        states = probe_states(bench, "eval", {"width": 280, "height": 168}, n=args.states)
    rows, out = [], {}
    with torch.no_grad():
        for name, shared in (("whole passes", False), ("shared prefix", True)):
            t0 = time.perf_counter()
            out[name] = answer_distributions(model, processor, states, shared_prefix=shared)
            rows.append({"path": name, "states": len(states), "seconds": time.perf_counter() - t0})
    diff = float(abs(out["whole passes"] - out["shared prefix"]).max())
    base = rows[0]["seconds"]
    print(f"{'path':<14} {'states':>6} {'s/state':>8} {'speed-up':>8}")
    for r in rows:
        r["seconds_per_state"] = r["seconds"] / r["states"]
        r["speedup"] = base / r["seconds"]
        print(f"{r['path']:<14} {r['states']:>6} {r['seconds_per_state']:>8.3f} {r['speedup']:>7.2f}x")
    print(f"largest difference between the two distributions: {diff:.2e}")
    result = {"benchmark": "image_probe_speed", "machine": machine(), "date": dt.datetime.now(dt.UTC).isoformat(),
              "git_commit": git_commit(), "model": f"builtin:{args.model}", "size": "280x168", "rows": rows,
              "max_abs_diff": diff}
    path = HERE / "results" / f"image_probe_speed-{args.tag}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
