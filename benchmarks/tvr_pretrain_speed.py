"""Speed of `spatialrl tvr pretrain-data` (TVR visual pretraining pairs), end to end as a user runs it.

Builds a small bench (its `sft` split's scenes give the poses), then times the whole command — start-up,
house builds, batched rendering, PNG encode and atomic writes — for N pairs at one frame size, several
runs. Prints a table; results: benchmarks/results/tvr_pretrain_speed-<tag>.json (machine, date, commit).

    python benchmarks/tvr_pretrain_speed.py --pairs 500 --size 280x168 --runs 2 --tag vm
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from common import git_commit, machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=500, help="pairs written per run")
    ap.add_argument("--size", default="280x168", help="frame size WxH")
    ap.add_argument("--runs", type=int, default=2, help="timed runs (each writes a fresh folder)")
    ap.add_argument("--tasks", type=int, default=40, help="sft tasks of the bench")
    ap.add_argument("--scenes", type=int, default=20, help="sft scenes of the bench")
    ap.add_argument("--tag", default="vm", help="suffix of the results file name")
    args = ap.parse_args()
    w, h = args.size.lower().split("x")
    cli = [sys.executable, "-m", "spatialrl.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "bench"
        subprocess.run([*cli, "tvr", "make-bench", "--out", str(bench), "--seed", "3",
                        "--sizes", f"eval=0,sft={args.tasks},rl=0,diag_rotate=0,diag_move=0",
                        "--scenes", f"sft={args.scenes},eval=0,rl=0"], check=True, capture_output=True)
        seconds = []
        for run in range(args.runs):
            out = Path(tmp) / f"pairs-{run}"
            t0 = time.perf_counter()
            subprocess.run([*cli, "tvr", "pretrain-data", "--data", str(bench), "--split", "sft", "--out", str(out),
                            "--pairs", str(args.pairs), "--seed", str(run), "--set", f"width={w}", "--set",
                            f"height={h}"], check=True, capture_output=True)
            seconds.append(time.perf_counter() - t0)
            samples = sum(1 for _ in (out / "samples.jsonl").open())
            if samples != args.pairs:
                raise SystemExit(f"{out}: {samples} samples written, asked for {args.pairs}")
        size_mb = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 1e6
    row = {"width": int(w), "height": int(h), "pairs": args.pairs, "scenes": args.scenes, "runs": seconds,
           "median_s": statistics.median(seconds), "pairs_per_s": args.pairs / statistics.median(seconds),
           "folder_mb": round(size_mb, 1)}
    print(f"{'size':<10} {'pairs':>6} {'median s':>9} {'pairs/s':>8} {'MB':>6}")
    print(f"{args.size:<10} {args.pairs:>6} {row['median_s']:>9.1f} {row['pairs_per_s']:>8.1f} {size_mb:>6.1f}")
    path = Path(__file__).parent / "results" / f"tvr_pretrain_speed-{args.tag}.json"
    path.write_text(json.dumps({"benchmark": "tvr_pretrain_speed", "machine": machine(),
                                "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(),
                                "note": "end to end: start-up, house builds, render, PNG encode, fsynced writes",
                                "rows": [row]}, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
