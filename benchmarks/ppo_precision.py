"""PPO health check: with lr 0 the policy never changes, so every PPO ratio must be 1 — unless the
scoring pass and the training pass disagree numerically. Under bf16 autocast the sequence log-prob of a
V-IRL answer (a sum over ~60 tokens of log-softmax(logits / 0.2)) moves with batch shape and kernel
choice; this measures by how much, per training precision, through the real trainer.

    python benchmarks/ppo_precision.py --dtypes auto float32        # GPU: auto = bf16 autocast
    python benchmarks/ppo_precision.py --dtypes float32 --num-envs 4  # CPU check (must print kl 0)
    python benchmarks/ppo_precision.py --model llama11b-random --dtypes bfloat16 --new-tokens 128 \
        --grid-size 2405 --minibatch-size 1 --grad-accum 32 --gradient-checkpointing   # the 11B run, at lr 0

Reported per dtype: approx_kl (mean of (r - 1) - log r), clipfrac (share of samples whose ratio left
1 ± 0.1) and the mean ratio, over one update of ``--num-steps`` V-IRL VL steps from ``--model``; beside
the sequence KL the per-token one (``ppo/approx_kl_token``: each answer token's own ratio) and the token
clip fraction, so a sequence KL far from 0 reads as many small per-token differences or a few large ones.

The fast rows' settings of ``rl_speed.py`` (issue 24's open check: LoRA, frozen tower, vision cache,
merged-copy rollouts, static KV cache, packed conversations, compiled blocks) are flags here too:

    python benchmarks/ppo_precision.py --model qwen25vl7b-random --dtypes bfloat16 --grid-size 2405 \
        --new-tokens 128 --num-envs 16 --num-steps 64 --minibatch-size 1 --grad-accum 64 --shuffle episodes \
        --freeze-vision --lora 16 --vision-cache-mb 2048 --kv-cache static --merge-lora --compile off on

``--model`` is a ``model.path`` (default builtin:virl-sft: fp32 weights; ``bfloat16`` and ``auto`` then
both mean bf16 autocast on a GPU) or one of ``rl_speed.build``'s random models (``llama11b-random``,
``mllama-small-random``), handed to the trainer prebuilt as ``rl_speed.py`` does: their weights are
pure bf16 for ``--dtypes bfloat16`` (how ``rl_speed.py`` trains the 11B) and fp32 otherwise, and the run
stops without the final export (21 GB for the 11B). The other flags default to the values this check
always used (micro-batch 4, no accumulation, 96-token answers, 224² grids).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import os
import tempfile
from pathlib import Path
from typing import Any

from common import git_commit, machine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
# built by rl_speed.build, passed prebuilt
RANDOM_MODELS = ("llama11b-random", "mllama-small-random", "qwen25vl7b-random", "qwen25vl-small-random")


def measure(dtype: str, shuffle: str, compiled: bool, data: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from rl_speed import build, lever_overrides  # a sibling script: benchmarks/ is on sys.path

    from spatialrl.io import read_jsonl
    from spatialrl.train.common import reset_accelerate_state
    from spatialrl.train.config import load_config
    from spatialrl.train.ppo import train
    from spatialrl.train.rl_config import PPOConfig

    run = work / f"{dtype}-{shuffle}-{'compiled' if compiled else 'eager'}"
    over = {"output_dir": str(run), "updates": 1, "shuffle": shuffle, "num_envs": args.num_envs, "num_steps": args.num_steps,
            "epochs": 1, "micro_batch_size": args.minibatch_size, "grad_accum": args.grad_accum, "optim.lr": 0.0,
            "model.path": args.model, "model.dtype": dtype, "model.gradient_checkpointing": args.gradient_checkpointing,
            "sampling.temperature": 0.2, "sampling.max_new_tokens": args.new_tokens,
            "checkpoint.every": 0, "logging.report_to": "none", "task.name": "virl", "task.data": str(data),
            "task.options": {"mode": "vl", "grid_size": args.grid_size, "episodes": 256, "seed": 1},
            # the fast rows' levers (rl_speed.py); all off by default
            **lever_overrides(args.freeze_vision, args.vision_cache_mb, args.kv_cache, args.lora, args.merge_lora,
                              compiled)}
    prebuilt = None
    if args.model in RANDOM_MODELS:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        prebuilt = build(args.model, device)
        prebuilt[0].to(torch.bfloat16 if dtype == "bfloat16" else torch.float32)
        over.update({"model.path": "prebuilt", "task.max_tokens": 32768})
    try:  # one update and no final export (21 GB for the 11B): a check, not a model
        train(load_config(PPOConfig, HERE.parent / "configs/ppo/tiny_cpu.yaml", over), prebuilt=prebuilt, stop_after=1)
    finally:
        reset_accelerate_state()  # the next dtype builds a new Accelerator with another mixed precision in this process
        prebuilt = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    row = [r for r in read_jsonl(run / "metrics.jsonl") if "losses/approx_kl" in r][-1]
    return {"dtype": dtype, "shuffle": shuffle, "compile": compiled, "approx_kl": row["losses/approx_kl"],
            "clipfrac": row["losses/clipfrac"], "ratio": row["losses/ratio"], "samples": row["charts/update_samples"],
            "approx_kl_sequence": row["ppo/approx_kl_sequence"], "approx_kl_token": row["ppo/approx_kl_token"],
            "clipfrac_token": row["ppo/clip_fraction_token"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", nargs="+", default=["auto", "float32"], choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--model", default="builtin:virl-sft")
    ap.add_argument("--num-envs", type=int, default=16)
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--shuffle", nargs="+", default=["samples"], choices=["samples", "batches", "episodes"],
                    help="PPO epoch order: regrouped samples, or the scoring pass's batches kept whole")
    ap.add_argument("--minibatch-size", type=int, default=4, help="samples per forward (scoring and training)")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--grid-size", type=int, default=224, help="V-IRL VL grid size (2405 for parity)")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--freeze-vision", action="store_true", help="model.freeze_vision (the fast rows' frozen tower)")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank on the language model (0: full model)")
    ap.add_argument("--vision-cache-mb", type=float, default=1024, help="sampling.vision_cache_mb (0: off)")
    ap.add_argument("--kv-cache", default="dynamic", choices=["dynamic", "static"], help="sampling.kv_cache")
    ap.add_argument("--merge-lora", action="store_true", help="with --lora: rollouts from the merged copy")
    ap.add_argument("--compile", nargs="+", default=["off"], choices=["off", "on", "deterministic"],
                    help="model.compile per row (the trained model's blocks compiled; both: side by side); "
                         "deterministic: compiled under torch._inductor.config.deterministic")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/ppo_precision-<machine>.json)")
    args = ap.parse_args()

    import torch
    import torch._inductor.config as inductor_config

    from spatialrl.envs.virl.testdata import random_routes, write_dataset
    from spatialrl.io import atomic_write_json

    host = torch.cuda.get_device_name(0) if torch.cuda.is_available() else machine()
    work = Path(tempfile.mkdtemp(prefix="ppo-precision-"))
    data = write_dataset(work / "city", random_routes(16, seed=0), pano_size=(512, 256))
    slug = "".join(c if c.isalnum() else "-" for c in host.lower()).strip("-")[:40]
    out = Path(args.out or HERE / "results" / f"ppo_precision-{slug}.json")
    header = {"benchmark": "ppo_precision", "machine": host, "git_commit": git_commit(),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "torch": torch.__version__, "args": vars(args)}
    rows = []
    for d in args.dtypes:
        for sh in args.shuffle:
            for c in args.compile:
                # "deterministic": compiled, with inductor's deterministic mode (no timing-picked reduction
                # configs, pytorch#163589): the lever after train-mode scoring if the GPU still shows a gap
                with (inductor_config.patch(deterministic=True) if c == "deterministic" else contextlib.nullcontext()):
                    rows.append({**measure(d, sh, c != "off", data, work, args),
                                 "inductor_deterministic": c == "deterministic"})
                print(rows[-1], flush=True)
                atomic_write_json(out, {**header, "rows": rows})  # after every row: a cut run keeps what it measured
    levers = f", LoRA r {args.lora}" if args.lora else ""
    print(f"\nPPO ratios at lr 0 ({args.model}{levers}, V-IRL VL {args.grid_size}², T 0.2, {args.num_steps} steps, "
          f"micro-batch {args.minibatch_size}) on {host}")
    print(f"{'dtype':<10} {'shuffle':<8} {'compile':<7} {'approx_kl':>10} {'clipfrac':>9} {'ratio':>8} "
          f"{'kl/token':>10} {'clip/token':>10}")
    for r in rows:
        comp = "determ." if r["inductor_deterministic"] else str(r["compile"])
        print(f"{r['dtype']:<10} {r['shuffle']:<8} {comp:<7} {r['approx_kl']:>10.4f} {r['clipfrac']:>9.3f} "
              f"{r['ratio']:>8.3f} {r['approx_kl_token']:>10.2e} {r['clipfrac_token']:>10.3f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
