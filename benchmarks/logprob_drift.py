"""Log-prob drift: how far the three computations of one sampled answer's log-probs disagree, per model
and precision — the numerical floor under PPO's ratio ρ = exp(log π − log π_old).

PPO reads the log-prob of the same tokens three times (``spatialrl/train/ppo.py``):

* **generate** — recorded while sampling (``sample_segments``: left-padded batch, KV cache, one query
  token per step, the Qwen vision-feature cache on as in rollouts);
* **scoring** — the old log-probs: one teacher-forced forward per batch, ``model.eval()``, ``no_grad``
  (``score_tokens``, right-padded);
* **training** — the new log-probs: ``model.train()``, gradients enabled, micro-batch 1 (``--micro-batch``).

With the weights unchanged all three are the same function of the same tokens, so every difference is
kernel numerics (batch shape, padding, KV cache vs full pass, autograd-enabled kernel choice) — or a
bug. A fourth pass, **scoring-mb** (eval, ``no_grad``, micro-batch ``--micro-batch``), splits
scoring-vs-training into a batch-shape part (scoring vs scoring-mb) and a mode/autograd part
(scoring-mb vs training).

Per pair (A vs B, ratio r = exp(log p_B − log p_A), A playing π_old) over ``--prompts`` first-turn V-IRL
VL prompts (a generated city, ``envs/virl/testdata.py``) and their sampled answers (temperature
``--temperature``, log-probs of logits / temperature as PPO computes them):

* mean and max |Δ log p| per answer token, and the share of tokens whose log-probs are bit-identical;
* sequence level, as PPO logs it for an answer of Σ (unweighted) token log-probs: approx_kl = mean of
  (r − 1) − log r, clipfrac = share of answers with |r − 1| > 0.1 (PPO's ε), and mean |log r|.

Precisions (``--dtypes``): ``float32`` (fp32 weights, no autocast); ``bfloat16`` (pure bf16 weights,
run under bf16 autocast as the trainers run a bf16 model with ``model.dtype=bfloat16``); ``auto`` (fp32
weights under bf16 autocast — the trainers' mixed precision on a GPU). Random models are built by
``rl_speed.build`` (bf16 on a GPU, so their fp32 rows hold bf16-rounded weights); others
(``builtin:NAME``, ``preset:NAME``, a folder) load as the trainers load ``model.path``.

    python benchmarks/logprob_drift.py --models llama11b-random --dtypes bfloat16 --new-tokens 128 --grid-size 2405
    python benchmarks/logprob_drift.py --models builtin:virl-sft mllama-small-random --dtypes float32 bfloat16 \\
        --prompts 4 --new-tokens 32 --device cpu                                       # CPU check
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from common import git_commit
from common import machine as host_machine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
RANDOM_MODELS = ("llama11b-random", "mllama-small-random", "builtin-small", "builtin-tiny")  # rl_speed.build's
PASSES = ("generate", "scoring", "scoring-mb", "training")
PAIRS = (("generate", "scoring"), ("scoring", "training"), ("generate", "training"),
         ("scoring", "scoring-mb"), ("scoring-mb", "training"))
CLIP = 0.1  # PPO's ε (SFTvsRL clip_param)


def load(name: str, dtype: str, device: str, seed: int = 0) -> tuple[Any, Any]:
    """``(model, processor)`` with weights in ``dtype``'s storage type, on ``device``, in eval mode."""
    import torch

    if name in RANDOM_MODELS:
        from rl_speed import build  # a sibling script: benchmarks/ is on sys.path

        model, processor = build(name, device, seed=seed)
    else:
        from spatialrl.train.common import load_model_and_processor
        from spatialrl.train.config import ModelConfig

        model, processor, _ = load_model_and_processor(ModelConfig(path=name), seed)
    weights = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    return model.to(device=device, dtype=weights).eval(), processor


def autocast(dtype: str, device: str) -> Any:
    import torch

    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def prompts(data: Path, args: argparse.Namespace, turns: Any) -> list[Any]:
    """First-turn V-IRL VL segments of ``args.prompts`` episodes, tokenised as the PPO env pool does."""
    from spatialrl.rollout.agent_loop import EnvPool
    from spatialrl.train.policy_ops import sample_segments
    from spatialrl.train.rl_config import RLTaskConfig
    from spatialrl.train.task_stream import task_episodes

    task = RLTaskConfig(name="virl", data=str(data), max_tokens=32768,
                        options={"mode": "vl", "grid_size": args.grid_size, "episodes": max(16, args.prompts), "seed": 1})
    suite, options, episodes = task_episodes(task)
    pool = EnvPool(suite, options, turns, args.prompts, task.max_turns, task.max_tokens, sample=sample_segments)
    for i in range(args.prompts):
        pool.start(i, episodes[i % len(episodes)])
    segs = [slot.segment for slot in pool.slots]
    pool.close()
    return segs


def score(model: Any, turns: Any, segs: list[Any], batch: int, temperature: float, device: str) -> list[list[float]]:
    """Teacher-forced log-probs of each segment's answer tokens, ``batch`` segments per forward (right
    padded, as PPO's ``batch_inputs``) in the grad mode and train/eval mode the caller set."""
    from spatialrl.train.policy_ops import score_tokens

    out = []
    for lo in range(0, len(segs), batch):
        chunk = segs[lo:lo + batch]
        inputs = turns.collate([(s, len(s)) for s in chunk], padding_side="right", device=device)
        starts, ends = [len(s.prompt_ids) for s in chunk], [len(s) for s in chunk]
        logp = score_tokens(model, inputs, starts, temperature, end=ends).logp.detach().float().cpu()
        out.extend(logp[b, len(s.prompt_ids):len(s)].tolist() for b, s in enumerate(chunk))
    return out


def compare(a: list[list[float]], b: list[list[float]]) -> dict[str, float]:
    """Token and sequence statistics of pass ``b`` against pass ``a`` (``a`` = π_old)."""
    deltas = [y - x for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]
    log_r = [sum(rb) - sum(ra) for ra, rb in zip(a, b, strict=True)]
    kl = [math.expm1(x) - x if x < 700 else math.inf for x in log_r]
    return {"tokens": len(deltas), "mean_abs_dlogp": sum(map(abs, deltas)) / max(1, len(deltas)),
            "max_abs_dlogp": max(map(abs, deltas), default=0.0),
            "identical_tokens": sum(d == 0.0 for d in deltas) / max(1, len(deltas)),
            "approx_kl": sum(kl) / len(kl),
            "clipfrac": sum(not math.log1p(-CLIP) <= x <= math.log1p(CLIP) for x in log_r) / len(log_r),
            "mean_abs_log_ratio": sum(map(abs, log_r)) / len(log_r), "max_abs_log_ratio": max(map(abs, log_r))}


def measure(name: str, dtype: str, data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from spatialrl.agents.base import SamplingParams
    from spatialrl.agents.vision_cache import VisionCache
    from spatialrl.rollout.trajectory import TurnTokenizer
    from spatialrl.train.common import prepare_trainable
    from spatialrl.train.config import ModelConfig
    from spatialrl.train.policy_ops import sample_segments

    t0 = time.perf_counter()
    model, processor = load(name, dtype, args.device)
    if args.gradient_checkpointing:  # as the trainer applies it (acts in train mode only)
        model = prepare_trainable(model, ModelConfig(gradient_checkpointing=True))
    turns = TurnTokenizer(processor, model.config.model_type)
    segs = prompts(data, args, turns)
    t_load = time.perf_counter() - t0
    sampling = SamplingParams(temperature=args.temperature, top_p=1.0, max_new_tokens=args.new_tokens)
    generator = torch.Generator(device=args.device).manual_seed(args.seed)
    cache = VisionCache(args.vision_cache_mb) if args.vision_cache_mb > 0 and VisionCache.supports(model) else None
    seconds: dict[str, float] = {}
    logps: dict[str, list[list[float]]] = {}
    with autocast(dtype, args.device):
        t = time.perf_counter()
        model.eval()
        answers = sample_segments(model, turns, segs, sampling, generator, vision_cache=cache)
        for seg, (ids, lps) in zip(segs, answers, strict=True):
            turns.add_policy(seg, ids, lps, turn=0)
        logps["generate"] = [lps for _, lps in answers]
        seconds["generate"] = time.perf_counter() - t
        with torch.no_grad():
            for label, batch in (("scoring", len(segs)), ("scoring-mb", args.micro_batch)):
                t = time.perf_counter()
                logps[label] = score(model, turns, segs, batch, args.temperature, args.device)
                seconds[label] = time.perf_counter() - t
        model.train()
        with torch.enable_grad():
            t = time.perf_counter()
            logps["training"] = score(model, turns, segs, args.micro_batch, args.temperature, args.device)
            seconds["training"] = time.perf_counter() - t
        model.eval()
    base = {"model": name, "dtype": dtype, "prompts": len(segs),
            "prompt_tokens_mean": sum(len(s.prompt_ids) for s in segs) / len(segs),
            "answer_tokens_mean": sum(len(x) for x in logps["generate"]) / len(segs),
            "answer_logp_mean": sum(map(sum, logps["generate"])) / len(segs),
            "saturated_tokens": sum(x == 0.0 for r in logps["generate"] for x in r) / max(1, sum(map(len, logps["generate"]))),
            "load_seconds": t_load, "pass_seconds": seconds,
            "params": sum(p.numel() for p in model.parameters())}
    rows = [{**base, "pair": f"{a} vs {b}", **compare(logps[a], logps[b])} for a, b in PAIRS]
    del model, processor
    gc.collect()
    if args.device != "cpu":
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["builtin:virl-sft"],
                    help=f"any of {', '.join(RANDOM_MODELS)}, builtin:NAME, preset:NAME or a model folder")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16", "auto"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.2, help="SFTvsRL's sampling temperature")
    ap.add_argument("--grid-size", type=int, default=224, help="V-IRL VL grid image size (2405 for parity)")
    ap.add_argument("--micro-batch", type=int, default=1, help="samples per training-pass forward (PPO minibatch_size)")
    ap.add_argument("--vision-cache-mb", type=float, default=1024, help="rollout vision cache (0 = off; trainer default 1024)")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/logprob_drift-<machine>.json)")
    args = ap.parse_args()

    import torch

    from spatialrl.envs.virl.testdata import random_routes, write_dataset
    from spatialrl.io import atomic_write_json

    if args.threads:
        torch.set_num_threads(args.threads)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    host = host_machine() if args.device == "cpu" else torch.cuda.get_device_name(0)
    slug = "".join(c if c.isalnum() else "-" for c in host.lower()).strip("-")[:40]
    out = Path(args.out or HERE / "results" / f"logprob_drift-{slug}.json")
    header = {"benchmark": "logprob_drift", "machine": host, "device": args.device, "git_commit": git_commit(),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
              "args": vars(args)}
    data = write_dataset(Path(tempfile.mkdtemp(prefix="logprob-drift-")) / "city", random_routes(16, seed=0),
                         pano_size=(1024, 512))
    rows: list[dict[str, Any]] = []
    for name in args.models:
        for dtype in args.dtypes:
            try:
                new = measure(name, dtype, data, args)
            except torch.OutOfMemoryError as e:
                new = [{"model": name, "dtype": dtype, "error": f"out of memory: {str(e)[:200]}"}]
            rows.extend(new)
            for r in new:
                print({k: v for k, v in r.items() if k != "pass_seconds"}, flush=True)
            atomic_write_json(out, {**header, "rows": rows})  # after every model×dtype: a cut run keeps its rows

    print(f"\nLog-prob drift on {host} ({args.device}): V-IRL VL {args.grid_size}² grids, {args.prompts} prompts, "
          f"≤{args.new_tokens}-token answers, T {args.temperature}; r = exp(Σ log p_B − Σ log p_A)")
    print(f"{'model':<20} {'dtype':<9} {'A vs B':<26} {'tok':>5} {'mean|Δ|':>9} {'max|Δ|':>9} {'same':>5} "
          f"{'mean|log r|':>11} {'approx_kl':>10} {'clipfrac':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<20} {r['dtype']:<9} {r['error']}")
            continue
        print(f"{r['model']:<20} {r['dtype']:<9} {r['pair']:<26} {r['tokens']:>5} {r['mean_abs_dlogp']:>9.2e} "
              f"{r['max_abs_dlogp']:>9.2e} {r['identical_tokens']:>5.2f} {r['mean_abs_log_ratio']:>11.2e} "
              f"{r['approx_kl']:>10.2e} {r['clipfrac']:>8.2f}")
    atomic_write_json(out, {**header, "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
