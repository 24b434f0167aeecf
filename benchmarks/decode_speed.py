"""Decode speed of the RL sampler: prefill and per-token time of one rollout ``generate``, by KV cache.

Every row calls the trainers' own sampler (``train/policy_ops.sample_segments``) on the first turn of
``--batch-size`` V-IRL VL episodes (``--grid-size`` grids from a generated city), with answers fixed at
``--new-tokens`` tokens (random models never say stop), so rows differ only in ``kv_cache``:

* ``dynamic``: transformers' growing cache, the model run eagerly step by step;
* ``static``: the fixed-size cache that ``generate`` compiles (``torch.compile``, CUDA graphs) on a
  GPU. Its first call pays the compile; the row reports the calls after it (``--repeats``).

The clock: a wrapper around the token sampler (the logits processor every step goes through) stamps
each step after a device sync, so prefill = first stamp − call start and decode = the mean gap between
later stamps. Rows also report how many tokens equal the dynamic row's (greedy decoding: on a random
model in bf16 the top logits are near ties, so any change of kernels flips some and the answers part)
and the largest gap between a sampled token's recorded log-prob and a teacher-forced forward's —
what PPO's first ratio sees, and the check that a decoding path is right.
``--profile`` adds torch.profiler's top operators over a few eager decode steps (where the time goes).

On the GPU machine (transformers >= 5.24 for Mllama's static cache):

    python benchmarks/decode_speed.py --model llama11b-random --batch-size 16 --new-tokens 128 --profile

and on a CPU (checks the code path; no compile there):

    python benchmarks/decode_speed.py --model mllama-small-random --batch-size 4 --new-tokens 16 --grid-size 448
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import git_commit
from common import machine as host_machine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepClock:
    """Patches ``models.sampling.TokenSampler.__call__`` (looked up by ``sample_segments`` at call time)
    to record a synced timestamp at every decoding step."""

    def __init__(self) -> None:
        from spatialrl.models import sampling as hf

        self.hf, self.original, self.stamps = hf, hf.TokenSampler.__call__, []

    def __enter__(self) -> StepClock:
        original, stamps = self.original, self.stamps

        def timed(sampler, input_ids, scores):
            _sync()
            stamps.append(time.perf_counter())
            return original(sampler, input_ids, scores)

        self.hf.TokenSampler.__call__ = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hf.TokenSampler.__call__ = self.original


def first_turn_segments(processor: Any, model: Any, batch: int, grid: int) -> tuple[Any, list[Any]]:
    """``(turns, segments)``: the first prompt of ``batch`` V-IRL VL episodes, as the trainers build it."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.virl.testdata import random_routes, write_dataset
    from spatialrl.rollout.agent_loop import EnvPool
    from spatialrl.rollout.trajectory import TurnTokenizer
    from spatialrl.train.policy_ops import sample_segments

    tmp = Path(tempfile.mkdtemp(prefix="decode-speed-"))
    data = write_dataset(tmp / "city", random_routes(max(4, batch), seed=0), pano_size=(1024, 512))
    suite = get_suite("virl")
    options = {"data": str(data), "mode": "vl", "grid_size": grid, "episodes": 4 * batch, "seed": 42}
    turns = TurnTokenizer(processor, model.config.model_type)
    pool = EnvPool(suite, options, turns, batch, max_turns=99, max_tokens=1 << 20, sample=sample_segments)
    for i, spec in enumerate(suite.episodes(options)[:batch]):
        pool.start(i, spec)
    return turns, [s.segment for s in pool.slots]


def timed_call(model, turns, segments, sampling, kv_cache: str) -> dict[str, Any]:
    from spatialrl.train.policy_ops import sample_segments

    with StepClock() as clock:
        _sync()
        t0 = time.perf_counter()
        out = sample_segments(model, turns, segments, sampling, None, max_batch_size=len(segments), kv_cache=kv_cache)
        _sync()
        total = time.perf_counter() - t0
    gaps = [b - a for a, b in zip(clock.stamps, clock.stamps[1:], strict=False)]
    return {"seconds": total, "prefill_seconds": clock.stamps[0] - t0,
            "decode_ms_per_step": 1e3 * statistics.mean(gaps) if gaps else float("nan"),
            "steps": len(clock.stamps), "tokens": [ids for ids, _ in out], "logprobs": [lps for _, lps in out]}


def logprob_gap(model, turns, segments, tokens, logprobs, rows: int = 4) -> float:
    """Largest |sampled log-prob − teacher-forced log-prob| over the answers of the first ``rows``
    prompts, each scored alone (what PPO's first ratio sees; bf16 kernels differ by batch shape)."""
    import torch

    from spatialrl.train.policy_ops import collate_inputs, score_tokens

    device = next(model.parameters()).device
    gap = 0.0
    for seg, ids, lps in list(zip(segments, tokens, logprobs, strict=True))[:rows]:
        seg = seg.fork()
        turns.add_policy(seg, ids, lps, 0)
        with torch.no_grad():
            logp = score_tokens(model, collate_inputs(turns, [(seg, len(seg))], "right", device),
                                len(seg.prompt_ids), temperature=1.0).logp
        scored = logp[0, len(seg.prompt_ids):len(seg)].cpu()
        gap = max(gap, float((scored - torch.tensor(lps)).abs().max()))
    return gap


def profile_decode(model, turns, segments, sampling, steps: int) -> list[dict[str, Any]]:
    """torch.profiler's top operators (self CPU and device time) over a short eager generate."""
    import dataclasses

    import torch
    from torch.profiler import ProfilerActivity, profile

    from spatialrl.train.policy_ops import sample_segments

    short = dataclasses.replace(sampling, max_new_tokens=steps)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        sample_segments(model, turns, segments, short, None, max_batch_size=len(segments))
        _sync()
    rows = []
    for e in sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:15]:
        rows.append({"op": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3,
                     "device_ms": getattr(e, "self_device_time_total", 0.0) / 1e3})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama11b-random",
                    choices=["llama11b-random", "mllama-small-random", "builtin-small", "builtin-tiny"])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--grid-size", type=int, default=2405)
    ap.add_argument("--modes", nargs="+", default=["dynamic", "static"], choices=["dynamic", "static"])
    ap.add_argument("--repeats", type=int, default=2, help="timed calls per row after its warm-up call")
    ap.add_argument("--profile", action="store_true", help="also profile 8 eager decode steps")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/decode_speed-<model>-<machine>.json)")
    args = ap.parse_args()

    import torch
    from rollout_throughput import build_policy  # a sibling script: benchmarks/ is on sys.path

    from spatialrl.agents.base import SamplingParams
    from spatialrl.io import atomic_write_json

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    machine = host_machine() if device == "cpu" else torch.cuda.get_device_name(0)
    policy = build_policy(args.model, device, new_tokens=0)
    model = policy.model.eval()
    turns, segments = first_turn_segments(policy.processor, model, args.batch_size, args.grid_size)
    sampling = SamplingParams(max_new_tokens=args.new_tokens)  # greedy: rows must agree token for token
    eos = set(model.generation_config.eos_token_id if isinstance(model.generation_config.eos_token_id, list)
              else [model.generation_config.eos_token_id])

    import transformers

    slug = "".join(c if c.isalnum() else "-" for c in machine.lower()).strip("-")[:40]
    out = Path(args.out or HERE / "results" / f"decode_speed-{args.model}-{slug}.json")
    header = {"benchmark": "decode_speed", "model": args.model, "machine": machine, "device": device,
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "git_commit": git_commit(),
              "torch": torch.__version__, "transformers": transformers.__version__, "args": vars(args),
              "prompt_tokens": [len(s) for s in segments]}
    rows, reference, profile = [], None, []
    for mode in args.modes:
        with torch.no_grad():
            warm = timed_call(model, turns, segments, sampling, mode)  # static: the compile
            calls = [timed_call(model, turns, segments, sampling, mode) for _ in range(args.repeats)]
        tokens = calls[-1]["tokens"]
        reference = reference or tokens
        n_new = sum(len(t) for t in tokens)
        row = {"kv_cache": mode, "first_call_seconds": warm["seconds"],
               "seconds": statistics.mean(c["seconds"] for c in calls),
               "prefill_seconds": statistics.mean(c["prefill_seconds"] for c in calls),
               "decode_ms_per_step": statistics.mean(c["decode_ms_per_step"] for c in calls),
               "steps": calls[-1]["steps"], "new_tokens": n_new,
               "stopped_early": sum(1 for t in tokens if t and t[-1] in eos),
               "max_logprob_gap_vs_scoring": logprob_gap(model, turns, segments, tokens, calls[-1]["logprobs"]),
               "tokens_equal_dynamic": tokens == reference,
               "token_agreement": sum(a == b for x, y in zip(tokens, reference, strict=True)
                                      for a, b in zip(x, y, strict=False)) / max(1, sum(len(y) for y in reference))}
        row["tokens_per_second"] = n_new / row["seconds"]
        rows.append(row)
        print(row)
        if mode == "dynamic" and args.profile:  # before any compile: the eager decoder's own cost
            profile = profile_decode(model, turns, segments, sampling, 8)
        atomic_write_json(out, {**header, "rows": rows, "profile": profile})  # a cut run keeps its rows

    print(f"\n{args.model} on {machine}: {args.batch_size} V-IRL VL prompts ({args.grid_size}² grids, "
          f"{statistics.mean(len(s) for s in segments):.0f} tokens), {args.new_tokens} new tokens")
    print(f"{'kv_cache':<8} {'first call s':>12} {'call s':>7} {'prefill s':>9} {'ms/step':>8} {'tok/s':>8} "
          f"{'= dynamic':>9} {'|Δ logp|':>9}")
    for r in rows:
        print(f"{r['kv_cache']:<8} {r['first_call_seconds']:>12.1f} {r['seconds']:>7.2f} {r['prefill_seconds']:>9.2f} "
              f"{r['decode_ms_per_step']:>8.1f} {r['tokens_per_second']:>8.0f} {r['token_agreement']:>9.3f} "
              f"{r['max_logprob_gap_vs_scoring']:>9.2g}")
    if profile:
        print("\neager decode, top operators by self CPU time (8 steps):")
        for p in profile:
            print(f"  {p['op'][:48]:<48} {p['calls']:>6} calls {p['self_cpu_ms']:>9.1f} ms CPU {p['device_ms']:>9.1f} ms device")

    print(f"wrote {out}")


if __name__ == "__main__":
    main()
