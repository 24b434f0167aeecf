"""How many updates a from-scratch built-in VLM needs to learn image-only tasks (issue 19).

Trains a fresh model per (task, seed) on the synthetic tasks of `spatialrl.train.image_tasks` — one image's
colour, the second image's colour, same colour?, identical 4x4 patterns? — and prints, per task, the
updates until held-out accuracy reached the threshold on two evaluations in a row (or "not reached"),
the best and final accuracy, and the time per update. The last task is the fine-grained comparison a TVR
policy needs; the first three isolate the links before it. Results:
benchmarks/results/vision_learnability-<host>[-<tag>].json (machine, date, commit, curves).

    python benchmarks/vision_learnability.py                                   # tiny preset, CPU, ~10 min
    python benchmarks/vision_learnability.py --config configs/sft/tvr_ao_small.yaml --size 280x168 \\
        --device cuda --steps 20000 --tag h200                                 # the shipped TVR size
"""

from __future__ import annotations

import argparse
import statistics
from datetime import UTC, datetime
from pathlib import Path

from common import git_commit, machine, write_results


def build(args: argparse.Namespace, seed: int):
    from spatialrl.train.common import build_preset

    overrides: dict = {}
    preset = args.preset
    if args.config:
        from spatialrl.train.config import SFTConfig, load_config

        cfg = load_config(SFTConfig, args.config)
        if not cfg.model.path.startswith("preset:"):
            raise SystemExit(f"{args.config}: model.path must be preset:NAME (a from-scratch model), got {cfg.model.path!r}")
        preset, overrides = cfg.model.path.split(":", 1)[1], dict(cfg.model.preset_overrides or {})
    model, processor, _ = build_preset(preset, overrides, seed)
    return model.to(args.device), processor


def main() -> None:
    from spatialrl.train.image_tasks import TASKS, learn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", help="built-in preset (ignored with --config)")
    ap.add_argument("--config", help="an SFT recipe whose model section (preset + preset_overrides) to build")
    ap.add_argument("--tasks", default=",".join(t for t in TASKS if t != "same_pattern_joined"),
                    help="comma-separated subset of " + ", ".join(TASKS) + " (default: all but same_pattern_joined, "
                         "whose image is twice --size wide: compare it with same_pattern at a size the preset's "
                         "pixel bound keeps, e.g. --size 56x64 for tiny; docs/training.md)")
    ap.add_argument("--steps", type=int, default=3000, help="update cap per task")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (one fresh model each)")
    ap.add_argument("--size", default="112x64", help="image size WxH")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tag", default=None, help="suffix of the results file name")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]

    def save(complete: bool) -> None:  # after every run, so a job cut by a timeout keeps what it measured
        summary = {}
        for task in tasks:
            got = [r["steps_to_threshold"] for r in rows if r["task"] == task]
            reached = [g for g in got if g is not None]
            summary[task] = {"seeds": len(got), "reached": len(reached),
                             "median_updates": statistics.median(reached) if reached else None}
        write_results(args.out, "vision_learnability", args.tag, {
            "benchmark": "vision_learnability", "machine": machine(), "device": args.device,
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(), "complete": complete,
            "model": args.config or f"preset:{args.preset}", "size": [width, height], "batch_size": args.batch_size,
            "lr": args.lr, "warmup": 50, "max_grad_norm": 1.0, "threshold": args.threshold, "steps_cap": args.steps,
            "summary": summary, "rows": rows})

    rows: list[dict] = []
    for task in tasks:
        for seed in seeds:
            model, processor = build(args, seed)
            params = sum(p.numel() for p in model.parameters())
            r = learn(model, processor, task, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=seed,
                      eval_every=args.eval_every, threshold=args.threshold, width=width, height=height,
                      on_eval=lambda s, a, t=task, sd=seed: print(f"  {t} seed {sd} step {s}: {a:.2f}", flush=True))
            rows.append({**r, "seed": seed, "parameters": params})
            del model
            save(complete=False)

    print(f"\n{'task':<14}{'seed':>5}{'params':>10}{'updates to ' + format(args.threshold, '.0%'):>18}"
          f"{'best':>7}{'final':>7}{'chance':>8}{'s/update':>10}")
    for r in rows:
        reached = str(r["steps_to_threshold"]) if r["steps_to_threshold"] else f"not in {r['steps_run']}"
        print(f"{r['task']:<14}{r['seed']:>5}{r['parameters'] / 1e6:>9.2f}M{reached:>18}{r['best']:>7.2f}"
              f"{r['final']:>7.2f}{r['chance']:>8.2f}{r['seconds_per_step']:>10.3f}")
    save(complete=True)


if __name__ == "__main__":
    main()
