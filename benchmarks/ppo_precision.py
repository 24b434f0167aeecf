"""PPO health check: with lr 0 the policy never changes, so every PPO ratio must be 1 — unless the
scoring pass and the training pass disagree numerically. Under bf16 autocast the sequence log-prob of a
V-IRL answer (a sum over ~60 tokens of log-softmax(logits / 0.2)) moves with batch shape and kernel
choice; this measures by how much, per training precision, through the real trainer.

    python benchmarks/ppo_precision.py --dtypes auto float32        # GPU: auto = bf16 autocast
    python benchmarks/ppo_precision.py --dtypes float32 --num-envs 4  # CPU check (must print kl 0)
    python benchmarks/ppo_precision.py --model llama11b-random --dtypes bfloat16 --new-tokens 128 \
        --grid-size 2405 --minibatch-size 1 --grad-accum 32 --gradient-checkpointing   # the 11B run, at lr 0

Reported per dtype: approx_kl (mean of (r - 1) - log r), clipfrac (share of samples whose ratio left
1 ± 0.1) and the mean ratio, over one update of ``--num-steps`` V-IRL VL steps from ``--model``.

``--model`` is a ``model.path`` (default builtin:virl-sft: fp32 weights; ``bfloat16`` and ``auto`` then
both mean bf16 autocast on a GPU) or one of ``rl_speed.build``'s random models (``llama11b-random``,
``mllama-small-random``), handed to the trainer prebuilt as ``rl_speed.py`` does: their weights are
pure bf16 for ``--dtypes bfloat16`` (how ``rl_speed.py`` trains the 11B) and fp32 otherwise, and the run
stops without the final export (21 GB for the 11B). The other flags default to the values this check
always used (micro-batch 4, no accumulation, 96-token answers, 224² grids).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import tempfile
from pathlib import Path

from common import git_commit, machine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
RANDOM_MODELS = ("llama11b-random", "mllama-small-random")  # built by rl_speed.build, passed prebuilt


def measure(dtype: str, shuffle: str, data: Path, work: Path, args: argparse.Namespace) -> dict[str, float]:
    import torch

    from spatialrl.io import read_jsonl
    from spatialrl.train.common import reset_accelerate_state
    from spatialrl.train.config import load_config
    from spatialrl.train.ppo import train
    from spatialrl.train.rl_config import PPOConfig

    run = work / f"{dtype}-{shuffle}"
    over = {"output_dir": str(run), "updates": 1, "shuffle": shuffle, "num_envs": args.num_envs, "num_steps": args.num_steps,
            "epochs": 1, "micro_batch_size": args.minibatch_size, "grad_accum": args.grad_accum, "optim.lr": 0.0,
            "model.path": args.model, "model.dtype": dtype, "model.gradient_checkpointing": args.gradient_checkpointing,
            "sampling.temperature": 0.2, "sampling.max_new_tokens": args.new_tokens,
            "checkpoint.every": 0, "logging.report_to": "none", "task.name": "virl", "task.data": str(data),
            "task.options": {"mode": "vl", "grid_size": args.grid_size, "episodes": 256, "seed": 1}}
    prebuilt, stop_after = None, None
    if args.model in RANDOM_MODELS:
        from rl_speed import build  # a sibling script: benchmarks/ is on sys.path

        device = "cuda" if torch.cuda.is_available() else "cpu"
        prebuilt, stop_after = build(args.model, device), 1  # one update, no final export
        prebuilt[0].to(torch.bfloat16 if dtype == "bfloat16" else torch.float32)
        over.update({"model.path": "prebuilt", "task.max_tokens": 32768})
    try:
        train(load_config(PPOConfig, HERE.parent / "configs/ppo/tiny_cpu.yaml", over), prebuilt=prebuilt,
              stop_after=stop_after)
    finally:
        reset_accelerate_state()  # the next dtype builds a new Accelerator with another mixed precision in this process
        prebuilt = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    row = [r for r in read_jsonl(run / "metrics.jsonl") if "losses/approx_kl" in r][-1]
    return {"dtype": dtype, "shuffle": shuffle, "approx_kl": row["losses/approx_kl"], "clipfrac": row["losses/clipfrac"],
            "ratio": row["losses/ratio"], "samples": row["charts/update_samples"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", nargs="+", default=["auto", "float32"], choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--model", default="builtin:virl-sft")
    ap.add_argument("--num-envs", type=int, default=16)
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--shuffle", nargs="+", default=["samples"], choices=["samples", "batches"],
                    help="PPO epoch order: regrouped samples, or the scoring pass's batches kept whole")
    ap.add_argument("--minibatch-size", type=int, default=4, help="samples per forward (scoring and training)")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--grid-size", type=int, default=224, help="V-IRL VL grid size (2405 for parity)")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/ppo_precision-<machine>.json)")
    args = ap.parse_args()

    import torch

    from spatialrl.envs.virl.testdata import random_routes, write_dataset
    from spatialrl.io import atomic_write_json

    host = torch.cuda.get_device_name(0) if torch.cuda.is_available() else machine()
    work = Path(tempfile.mkdtemp(prefix="ppo-precision-"))
    data = write_dataset(work / "city", random_routes(16, seed=0), pano_size=(512, 256))
    rows = [measure(d, sh, data, work, args) for d in args.dtypes for sh in args.shuffle]
    print(f"\nPPO ratios at lr 0 ({args.model}, V-IRL VL {args.grid_size}², T 0.2, {args.num_steps} steps, "
          f"micro-batch {args.minibatch_size}) on {host}")
    print(f"{'dtype':<10} {'shuffle':<8} {'approx_kl':>10} {'clipfrac':>9} {'ratio':>8}")
    for r in rows:
        print(f"{r['dtype']:<10} {r['shuffle']:<8} {r['approx_kl']:>10.4f} {r['clipfrac']:>9.3f} {r['ratio']:>8.3f}")
    slug = "".join(c if c.isalnum() else "-" for c in host.lower()).strip("-")[:40]
    out = Path(args.out or HERE / "results" / f"ppo_precision-{slug}.json")
    atomic_write_json(out, {"benchmark": "ppo_precision", "machine": host, "git_commit": git_commit(),
                            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                            "torch": torch.__version__, "args": vars(args), "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
