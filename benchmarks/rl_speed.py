"""RL trainer speed: PPO samples/min and GRPO update time, through the real trainers on V-IRL VL.

Each row runs ``spatialrl.train.ppo.train`` / ``spatialrl.train.grpo.train`` unchanged (env slots,
batched token-level sampling, scoring, the update with its losses) on the V-IRL VL env over a
generated city (``envs/virl/testdata.py``; no GL needed), for ``--updates`` updates, and reports the
last one (the first pays for kernel and cache warm-up):

* PPO samples/min = env steps collected in an update / the update's wall time (collection + scoring +
  ``ppo_epochs`` passes of training), per GPU — what the seed reports as ~51 samples/min on 8×H800
  (SFTvsRL: one env at batch size 1 per GPU; 256 steps in ~40 min of rollout per GPU process);
* GRPO update time = one multi-turn update of ``tasks × G`` trajectories (rollout + old/ref scoring +
  the mini-batch updates), with its rollout share.

Models: ``llama11b-random`` — the Llama-3.2-11B-Vision configuration (Mllama, 10.7B parameters) with
random weights built in bf16 on the GPU (``benchmarks/rollout_throughput.py`` holds the config);
``builtin-small`` / ``builtin-tiny`` — our presets; ``mllama-small-random`` — the 11B code path at toy
width, to check the script on a CPU; ``qwen25vl7b-random`` — Qwen2.5-VL-7B-Instruct's architecture (8.3B,
the model most multi-turn VLM RL frameworks train) with random weights, and ``qwen25vl-small-random`` its
code path at toy width (both built in ``rollout_throughput.py``). Random models never say stop, so every answer runs to
``--new-tokens``. Training is pure bf16 on a GPU (weights, gradients and, without offload, AdamW's
moments: 8 bytes per parameter); ``--offload cpu`` moves the moments and an fp32 master copy to the
host (``optimizer_offload``, 4 GPU bytes per parameter; ``--no-master`` drops the master copy when host
memory is short — 10.7B × 12 bytes is 128 GB).

Run on the GPU machine (one command; writes benchmarks/results/rl_speed-<model>-<machine>.json):

    python benchmarks/rl_speed.py --model llama11b-random --offload none cpu --gradient-checkpointing
    python benchmarks/rl_speed.py --model builtin-small --offload none
    python benchmarks/rl_speed.py --model qwen25vl7b-random --offload none --gradient-checkpointing

and on a CPU (checks the code path in a few minutes; the numbers mean nothing there):

    python benchmarks/rl_speed.py --model builtin-tiny --device cpu --num-envs 2 --num-steps 4 --new-tokens 8 \\
        --grid-size 448 --tasks 2 --group-size 2 --ppo-epochs 1 --minibatch-size 2 --grad-accum 2 --offload none cpu
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from common import git_commit
from common import machine as host_machine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
SEED_PPO_SAMPLES_PER_MIN = 51.0  # the seed's figure, 8×H800 (see the module docstring)
SEED_ROLLOUT = "256 steps in ~40 min per GPU process (6.4 steps/min)"
TARGET_11B = 100.0  # PPO samples/min on one H200 for the 11B-class model (the target)


def build(name: str, device: str, seed: int = 0) -> tuple[Any, Any]:
    """``(model, processor)`` for a model name, built in memory (the rollout benchmark's builders)."""
    from rollout_throughput import build_policy  # a sibling script: benchmarks/ is on sys.path

    policy = build_policy(name, device, new_tokens=0, seed=seed)
    return policy.model, policy.processor


def lever_overrides(freeze_vision: bool, cache_mb: float, kv: str, lora_r: int, merge: bool,
                    compiled: bool) -> dict[str, Any]:
    """The fast rows' levers as config overrides (also ``ppo_precision.py``'s): LoRA r (0: full model,
    alpha 2r), frozen tower, vision cache, rollout KV cache, merged-copy rollouts, compiled blocks."""
    return {"model.freeze_vision": freeze_vision, "sampling.vision_cache_mb": cache_mb, "sampling.kv_cache": kv,
            "sampling.merge_lora": merge and lora_r > 0, "model.lora.enabled": lora_r > 0,
            "model.lora.r": max(lora_r, 1), "model.lora.alpha": 2 * max(lora_r, 1),
            "model.lora.merge_on_save": False, "model.compile": compiled}


def common_overrides(args: argparse.Namespace, data: Path, out: Path, offload: bool) -> dict[str, Any]:
    return {
        "output_dir": str(out), "updates": args.updates, "checkpoint.every": 0, "logging.report_to": "none",
        "model.path": "prebuilt", "model.dtype": "bfloat16" if args.device != "cpu" else "float32",
        "model.gradient_checkpointing": args.gradient_checkpointing, "optimizer_offload": offload,
        **lever_overrides(args.freeze_vision, args.cache_mb, args.kv, args.lora_r, args.merge, args.compiled),
        "offload_master_weights": not args.no_master,
        "sampling.max_new_tokens": args.new_tokens, "sampling.top_p": 1.0,
        "task.name": "virl", "task.data": str(data), "task.max_tokens": 32768,
        "task.options": {"mode": "vl", "grid_size": args.grid_size, "episodes": 4096, "seed": 42},
        # the update before the reported one: the profiler's overhead stays out of the reported timings
        "profile_update": args.updates - 1 if args.profile else 0,
    }


def last_update(run: Path) -> dict[str, Any]:
    import json

    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "train/update_seconds" in r][-1]


def run_ppo(args, model, processor, data, out, offload) -> dict[str, Any]:
    from spatialrl.train.config import load_config
    from spatialrl.train.ppo import train
    from spatialrl.train.rl_config import PPOConfig

    over = common_overrides(args, data, out, offload)
    over.update({"num_envs": args.num_envs, "num_steps": args.num_steps, "epochs": args.ppo_epochs,
                 "micro_batch_size": args.mb, "grad_accum": args.accum, "shuffle": args.order,
                 "sampling.temperature": 0.2,
                 "optim.lr": 1e-7, "optim.max_grad_norm": 0.01})
    cfg = load_config(PPOConfig, HERE.parent / "configs/ppo/tiny_cpu.yaml", over)
    t0 = time.perf_counter()
    train(cfg, prebuilt=(model, processor), stop_after=args.updates)  # no final export (21 GB for the 11B)
    r = last_update(out)
    return {"algo": "ppo", "offload": offload, "samples_per_min": r["train/samples_per_minute"],
            "update_seconds": r["train/update_seconds"], "collect_seconds": r["train/collect_seconds"],
            "score_train_seconds": r["train/update_seconds"] - r["train/collect_seconds"],  # scoring + epochs
            "samples_per_update": r["charts/update_samples"], "wall_seconds": time.perf_counter() - t0,
            "samples_per_conversation": r.get("rollout/samples_per_conversation"),
            # the decoder's input tokens (real / padded) of the scoring pass and of all epochs together
            **{k.split("/")[1]: r.get(k) for k in ("train/score_tokens", "train/score_padded_tokens",
                                                   "train/epoch_tokens", "train/epoch_padded_tokens")},
            **{k.split("/")[1]: r[k] for k in ("train/generate_seconds", "train/env_seconds", "train/tokenize_seconds")},
            "num_envs": args.num_envs, "ppo_epochs": args.ppo_epochs, "minibatch_size": args.mb, "grad_accum": args.accum,
            "shuffle": args.order, "profile": profile_of(out, args)}


def profile_of(run: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """The profiled update's summary (``train/profiling.py``): kernel time by kind, busy share, top 8."""
    import json

    if not args.profile:
        return None
    summary = json.loads((run / f"profile-update-{args.updates - 1}.json").read_text())
    return {**{k: summary[k] for k in ("update", "timed", "wall_seconds", "busy_seconds", "busy_share", "calls",
                                       "host_op_seconds", "by_kind")}, "top": summary["top"][:8]}


def score_train_tflops(row: dict[str, Any], split: dict[str, int], frozen_base: bool) -> float | None:
    """Achieved dense-matmul TFLOP/s of the scoring pass + epochs, an estimate from the real tokens: 2 FLOPs
    per decoder parameter and token forward; an epoch token adds the backward, 2 more with a frozen base (LoRA:
    input gradients only) or 4 with the full model's weight gradients too. Leaves out attention's
    sequence-squared term, the output head (scored answer positions only) and the vision tower (frozen and
    cached in the fast rows), so it is a lower bound on the work done."""
    tokens, epochs, seconds = row.get("score_tokens"), row.get("epoch_tokens"), row.get("score_train_seconds")
    if not tokens or not epochs or not seconds:
        return None
    per_epoch_token = 4.0 if frozen_base else 6.0  # forward 2 + backward 2 (frozen base) or 4 (full)
    return split["text"] * (2.0 * tokens + per_epoch_token * epochs) / seconds / 1e12


def run_grpo(args, model, processor, data, out, offload) -> dict[str, Any]:
    from spatialrl.train.config import load_config
    from spatialrl.train.grpo import train
    from spatialrl.train.rl_config import GRPOConfig

    over = common_overrides(args, data, out, offload)
    over.update({"mode": "multi", "tasks_per_update": args.tasks, "group_size": args.group_size,
                 "mini_batches": 4, "micro_batch_size": args.mb, "kl_coef": args.kl_coef,
                 "sampling.temperature": 1.0, "optim.lr": 1e-6, "optim.max_grad_norm": 1.0})
    cfg = load_config(GRPOConfig, HERE.parent / "configs/grpo/tiny_cpu.yaml", over)
    t0 = time.perf_counter()
    train(cfg, prebuilt=(model, processor), stop_after=args.updates)  # no final export (21 GB for the 11B)
    r = last_update(out)
    return {"algo": "grpo", "offload": offload, "update_seconds": r["train/update_seconds"],
            "rollout_seconds": r["train/rollout_seconds"], "trajectories": r["rollout/trajectories"],
            "env_steps_per_update": r["episodes/length_mean"] * r["rollout/trajectories"],  # length = turns
            "policy_tokens": r["losses/policy_tokens"], "wall_seconds": time.perf_counter() - t0,
            **{k.split("/")[1]: r[k] for k in ("train/generate_seconds", "train/env_seconds", "train/tokenize_seconds")},
            "profile": profile_of(out, args)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from rollout_throughput import (  # a sibling script: benchmarks/ is on sys.path
        MODELS,
        measure_gpu,
        param_split,
    )

    ap.add_argument("--model", default="llama11b-random", choices=MODELS)
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--offload", nargs="+", default=["none"], choices=["none", "cpu"])
    ap.add_argument("--algos", nargs="+", default=["ppo", "grpo"], choices=["ppo", "grpo"])
    ap.add_argument("--updates", type=int, default=2, help="the last one is reported")
    ap.add_argument("--num-envs", type=int, default=16)
    ap.add_argument("--num-steps", type=int, default=64, help="PPO env steps per update")
    ap.add_argument("--ppo-epochs", type=int, default=4)
    ap.add_argument("--minibatch-size", type=int, nargs="+", default=[4],
                    help="samples per forward (PPO; GRPO micro-batch); several values run side by side at the "
                         "first one's samples per optimiser step (--grad-accum scaled)")
    ap.add_argument("--shuffle", nargs="+", default=["samples"], choices=["samples", "batches", "episodes"],
                    help="PPO epoch order per row (batches: the scoring pass's micro-batches, one turn each)")
    ap.add_argument("--grad-accum", type=int, default=16, help="PPO micro-batches per optimiser step at the first --minibatch-size")
    ap.add_argument("--tasks", type=int, default=8, help="GRPO tasks per update")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--kl-coef", type=float, default=0.01)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--grid-size", type=int, default=2405)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--vision-cache-mb", type=float, nargs="+", default=[1024],
                    help="the update's vision cache per row (0 = off); with --freeze-vision it also serves "
                         "the scoring pass and the epochs; several values run side by side")
    ap.add_argument("--freeze-vision", action="store_true",
                    help="train without the vision tower (TVRBench froze it): no vision backward in the epochs")
    ap.add_argument("--kv-cache", nargs="+", default=["dynamic"], choices=["dynamic", "static"],
                    help="rollout KV cache per row (static: generate compiles the decoder on a GPU); "
                         "several values run side by side")
    ap.add_argument("--lora", type=int, nargs="+", default=[0],
                    help="LoRA rank per row (0 = full fine-tune; LoRA trains the language model's adapters, "
                         "the base weights and vision tower stay frozen)")
    ap.add_argument("--merge-lora", nargs="+", default=["off"], choices=["off", "on"],
                    help="with --lora: sample rollouts from a merged copy (sampling.merge_lora) per row")
    ap.add_argument("--compile", nargs="+", default=["off"], choices=["off", "on"],
                    help="regional torch.compile of the trained model's repeated blocks (model.compile: the "
                         "decoder layers with their LoRA adapters, fused) per row; the scoring pass and epochs")
    ap.add_argument("--no-master", action="store_true",
                    help="with --offload cpu: no fp32 master copy on the host (offload_master_weights=false)")
    ap.add_argument("--profile", action="store_true",
                    help="torch.profiler over the scoring and training passes of update --updates - 1 (needs "
                         "--updates >= 3: the first warms up, the last is reported unprofiled); kernel time by kind")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/rl_speed-<model>-<machine>.json)")
    args = ap.parse_args()
    if args.profile and args.updates < 3:
        ap.error("--profile needs --updates >= 3 (warm-up, profiled, reported)")

    import torch

    from spatialrl.envs.virl.testdata import random_routes, write_dataset
    from spatialrl.io import atomic_write_json

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    machine = host_machine() if args.device == "cpu" else torch.cuda.get_device_name(0)
    slug = "".join(c if c.isalnum() else "-" for c in machine.lower()).strip("-")[:40]
    out = Path(args.out or HERE / "results" / f"rl_speed-{args.model}-{slug}.json")
    header = {"benchmark": "rl_speed", "model": args.model, "machine": machine, "device": args.device,
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "git_commit": git_commit(),
              "torch": torch.__version__, "args": vars(args),
              "seed_ppo_samples_per_min_8xH800": SEED_PPO_SAMPLES_PER_MIN, "target_11b_ppo_samples_per_min": TARGET_11B}
    if args.device != "cpu":  # the card's own dense bf16 matmul rate, for the epochs' achieved share
        header["limit"] = measure_gpu(args.device)
    tmp = Path(tempfile.mkdtemp(prefix="rl-speed-"))
    data = write_dataset(tmp / "city", random_routes(16, seed=0), pano_size=(1024, 512))

    rows = []
    grid = [(o, c, k, r, m, sh, g, cc) for o in args.offload for c in args.vision_cache_mb for k in args.kv_cache
            for r in args.lora for m in args.minibatch_size for sh in args.shuffle for g in args.merge_lora
            for cc in args.compile]
    per_step = args.minibatch_size[0] * args.grad_accum
    for offload, cache_mb, kv, lora_r, mb, order, merge, compiled in grid:
        # shuffle episodes: a micro-batch holds mb conversations of ~num_steps/num_envs samples each (an
        # episode longer than the update's turns); the optimiser step keeps ~per_step samples
        per_micro = mb * (max(1, args.num_steps // args.num_envs) if order == "episodes" else 1)
        args.cache_mb, args.kv, args.lora_r, args.mb, args.accum = cache_mb, kv, lora_r, mb, max(1, per_step // per_micro)
        args.order, args.merge, args.compiled = order, merge == "on" and lora_r > 0, compiled == "on"
        for algo in args.algos:
            model, processor = build(args.model, args.device)
            params = sum(p.numel() for p in model.parameters())
            if args.device != "cpu":
                torch.cuda.reset_peak_memory_stats()
            runner = run_ppo if algo == "ppo" else run_grpo
            try:
                run_dir = tmp / f"{algo}-{offload}-{cache_mb:g}-{kv}-{lora_r}-{mb}-{order}-{merge}-{compiled}"
                row = runner(args, model, processor, data, run_dir, offload == "cpu")
            except torch.OutOfMemoryError as e:
                row = {"algo": algo, "offload": offload == "cpu", "error": f"out of memory: {str(e)[:200]}"}
            if algo == "ppo":
                row["score_train_tflops_est"] = score_train_tflops(row, param_split(model), lora_r > 0)
            row.update(params=params, vision_cache_mb=cache_mb, kv_cache=kv, lora_r=lora_r, merge_lora=args.merge, minibatch_size=mb,
                       shuffle=order if algo == "ppo" else None, compile=args.compiled)
            if args.device != "cpu":
                row["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
            rows.append(row)
            print(row)
            atomic_write_json(out, {**header, "rows": rows})  # after every row: a cut run keeps what it measured
            del model, processor
            gc.collect()
            if args.device != "cpu":
                torch.cuda.empty_cache()

    print(f"\n{args.model} on {machine}; V-IRL VL {args.grid_size}² grids, {args.new_tokens}-token answers")
    print(f"{'algo':<5} {'offload':<8} {'cache MB':>8} {'kv':<7} {'lora':>4} {'merge':<5} {'mb':>3} {'shuffle':<7} {'compile':<7} {'samples/min':>11} "
          f"{'update s':>9} {'rollout s':>9} {'generate':>8} {'env':>5} {'tokenize':>8} {'score+train':>11} {'peak GiB':>9} "
          f"{'samples/conv':>12} {'epoch tokens':>12} {'TFLOP/s est':>11}")
    for r in rows:
        lead = (f"{r['algo']:<5} {str(r['offload']):<8} {r['vision_cache_mb']:>8.0f} {r['kv_cache']:<7} {r['lora_r']:>4} "
                f"{str(r.get('merge_lora', False)):<5} {r['minibatch_size']:>3} {str(r.get('shuffle') or '-'):<7} "
                f"{str(r.get('compile', False)):<7}")
        if "error" in r:
            print(f"{lead} {r['error']}")
            continue
        spm = f"{r['samples_per_min']:,.1f}" if "samples_per_min" in r else "-"
        roll = r.get("collect_seconds", r.get("rollout_seconds", 0.0))
        print(f"{lead} {spm:>11} {r['update_seconds']:>9.1f} {roll:>9.1f} {r['generate_seconds']:>8.1f} "
              f"{r['env_seconds']:>5.1f} {r['tokenize_seconds']:>8.1f} {r.get('score_train_seconds', 0.0):>11.1f} "
              f"{r.get('peak_gpu_gib', 0.0):>9.1f} {r.get('samples_per_conversation') or 0.0:>12.2f} "
              f"{r.get('epoch_tokens') or 0:>12,.0f} {r.get('score_train_tflops_est') or 0.0:>11.2f}")
    for r in rows:
        if r.get("profile"):
            p = r["profile"]
            kinds = ", ".join(f"{k} {v:.2f} s" for k, v in p["by_kind"].items())
            print(f"profile of update {p['update']} ({r['algo']}, mb {r['minibatch_size']}): {p['timed']} "
                  f"{p['busy_seconds']:.1f} s of {p['wall_seconds']:.1f} s wall ({100 * (p['busy_share'] or 0):.0f}%), "
                  f"{p['calls']:,} calls, host operators {p['host_op_seconds']:.1f} s; {kinds}")
            for t in p["top"][:5]:
                print(f"    {t['seconds']:8.2f} s {t['calls']:>8,} × [{t['kind']}] {t['name'][:90]}")
    if "limit" in header:
        print(f"this card's dense bf16 matmul rate: {header['limit']['matmul_tflops']:.0f} TFLOP/s (TFLOP/s est: "
              "the scoring pass + epochs, decoder matmuls of the real tokens only; see score_train_tflops)")
    print(f"seed: PPO ~{SEED_PPO_SAMPLES_PER_MIN:.0f} samples/min on 8×H800; rollout {SEED_ROLLOUT}; "
          f"target for the 11B-class model: >= {TARGET_11B:.0f} PPO samples/min on one H200")

    atomic_write_json(out, {**header, "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
