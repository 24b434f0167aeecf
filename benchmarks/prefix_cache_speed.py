"""Multi-turn rollout cost against turn index, with and without prefix KV reuse (``prefix_cache``).

A TVR episode with view-all (VA) memory re-sends its whole conversation every turn: every earlier frame
and answer. Without reuse the sampler prefills that whole prompt every turn, so the prefill grows
linearly with the turn index and an episode's prefill quadratically with its length. With
``EnvPool(prefix_cache=True)`` each slot keeps its KV cache and a turn prefills only the tokens its
answer and the env added (``models/sampling.py``: ``generate_from_prefixes``).

Two rollouts of the same episodes run side by side, turn by turn interleaved (the 2-core VM is
shared), through the trainers' own ``EnvPool`` + ``sample_segments`` with a fresh vision cache each (so
the vision tower's time is out of the comparison): ``prefix_cache`` off, then on. Per turn: the mean
prompt length, the prefill time (sampler call start to the first decoding step, stamped by a wrapper
around ``TokenSampler``), the decode time, the prompt tokens prefilled, and whether both rollouts
sampled the same tokens (greedy; exact in fp32, near ties may flip in bf16).

    python benchmarks/prefix_cache_speed.py --model builtin-small --batch-size 4 --turns 16   # CPU
    python benchmarks/prefix_cache_speed.py --model llama11b-random --batch-size 8 --turns 12  # GPU

Writes ``benchmarks/results/prefix_cache_speed-<model>-<machine>.json``: per-turn rows for both modes,
totals, machine, date, commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
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


class Clock:
    """A ``sample_segments`` wrapper that splits each call into prefill (call start to the first decoding
    step) and decode (the rest), stamping inside ``TokenSampler`` (looked up at call time)."""

    def __init__(self) -> None:
        from spatialrl.models import sampling
        from spatialrl.train.policy_ops import sample_segments

        self.sampling, self.inner = sampling, sample_segments
        self.prefill = self.decode = 0.0
        self.prefill_cpu = self.decode_cpu = 0.0  # process CPU seconds (all threads): steadier on a shared VM

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stamps: list[float] = []
        cpu: list[float] = []
        original = self.sampling.TokenSampler.__call__

        def stamped(sampler, input_ids, scores):
            if not stamps:
                _sync()
                stamps.append(time.perf_counter())
                cpu.append(time.process_time())
            return original(sampler, input_ids, scores)

        self.sampling.TokenSampler.__call__ = stamped
        try:
            _sync()
            t0, c0 = time.perf_counter(), time.process_time()
            out = self.inner(*args, **kwargs)
            _sync()
            t1, c1 = time.perf_counter(), time.process_time()
        finally:
            self.sampling.TokenSampler.__call__ = original
        self.prefill += stamps[0] - t0
        self.decode += t1 - stamps[0]
        self.prefill_cpu += cpu[0] - c0
        self.decode_cpu += c1 - cpu[0]
        return out

    def take(self) -> tuple[float, float, float, float]:
        out = (self.prefill, self.decode, self.prefill_cpu, self.decode_cpu)
        self.prefill = self.decode = self.prefill_cpu = self.decode_cpu = 0.0
        return out


def answer(step: Any) -> tuple[list[int], list[float]]:
    """The token ids and sampling log-probs a step's turn recorded in its segment."""
    traj = step.trajectory
    seg = traj.segments[traj.turn_segment[step.turn]]
    lo, hi = seg.turn_span(step.turn)
    off = len(seg.prompt_ids)
    return seg.ids[lo:hi], seg.response_logprobs[lo - off : hi - off]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin-small",
                    help="builtin-tiny, builtin-small, mllama-small-random or llama11b-random")
    ap.add_argument("--batch-size", type=int, default=4, help="slots (episodes in flight)")
    ap.add_argument("--turns", type=int, default=16, help="turns to run (TVR budgets: 30 single, 40 multi)")
    ap.add_argument("--max-new-tokens", type=int, default=16, help="answer length (random models never stop)")
    ap.add_argument("--size", default="640x360", help="TVR frame size WxH")
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1: CPU seconds = work)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch
    from rollout_throughput import build_policy

    from spatialrl.agents.base import SamplingParams
    from spatialrl.agents.vision_cache import VisionCache
    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench
    from spatialrl.rollout.agent_loop import EnvPool
    from spatialrl.rollout.trajectory import TurnTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    policy = build_policy(args.model, device, new_tokens=0)
    model = policy.model.eval()
    w, h = (int(v) for v in args.size.lower().split("x"))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    tmp = Path(tempfile.mkdtemp(prefix="prefix-cache-"))
    make_bench(tmp / "bench", BenchConfig.preset(seed=0, sizes={"eval": args.batch_size, "sft": 0, "rl": 0,
                                                                 "diag_rotate": 0, "diag_move": 0},
                                                  scenes={"eval": 2, "sft": 0, "rl": 0}), progress=False)
    suite = get_suite("tvr")
    options = {"data": str(tmp / "bench"), "width": w, "height": h, "memory": "va", "cache_mb": 0}
    specs = suite.episodes(options)[: args.batch_size]
    turns = TurnTokenizer(policy.processor, model.config.model_type)
    modes = {}
    for on in (False, True):
        clock = Clock()
        pool = EnvPool(suite, options, turns, len(specs), max_turns=args.turns + 1, max_tokens=1 << 20,
                       sample=clock, prefix_cache=on)
        for i, spec in enumerate(specs):
            pool.start(i, spec)
        modes[on] = {"pool": pool, "clock": clock, "cache": VisionCache(), "rows": [], "tokens": []}
    for t in range(args.turns):
        for on, m in modes.items():
            pool = m["pool"]
            active = pool.active()
            if not active:
                continue
            lengths = [len(pool.slots[i].segment) for i in active]
            before = pool.prefix.prefilled_tokens if pool.prefix is not None else None
            pool.take_seconds()
            steps, _ = pool.turn(model, sampling, None, vision_cache=m["cache"])
            seconds = pool.take_seconds()
            prefill, decode, prefill_cpu, decode_cpu = m["clock"].take()
            prefilled = pool.prefix.prefilled_tokens - before if pool.prefix is not None else sum(lengths)
            m["tokens"].append([answer(s) for s in steps])
            m["rows"].append({"turn": t, "prefix_cache": on, "slots": len(active),
                              "mean_prompt_tokens": sum(lengths) / len(lengths), "prefilled_tokens": prefilled,
                              "prefill_s": prefill, "decode_s": decode, "prefill_cpu_s": prefill_cpu,
                              "decode_cpu_s": decode_cpu, "generate_s": seconds["generate"]})
    same = [[x[0] for x in a] == [x[0] for x in b] for a, b in zip(modes[False]["tokens"], modes[True]["tokens"],
                                                                     strict=False)]
    gaps = [max((abs(p - q) for x, y in zip(a, b, strict=False) if x[0] == y[0] for p, q in zip(x[1], y[1], strict=True)),
                default=0.0) for a, b in zip(modes[False]["tokens"], modes[True]["tokens"], strict=False)]
    print(f"{args.model} on {device}, batch {len(specs)}, {args.max_new_tokens}-token answers, TVR VA {w}x{h}")
    print("prefill / decode: CPU seconds of the process (all threads; wall seconds in the JSON) on a CPU, else wall")
    key = "_cpu_s" if device == "cpu" else "_s"
    print(f"{'turn':>4} {'prompt tok':>10} | {'prefill s off':>13} {'on':>7} | {'decode s off':>12} {'on':>7} | "
          f"{'prefilled tok off':>17} {'on':>6} | same answers, max |dlogp|")
    for r0, r1, s, g in zip(modes[False]["rows"], modes[True]["rows"], same, gaps, strict=False):
        print(f"{r0['turn']:>4} {r0['mean_prompt_tokens']:>10.0f} | {r0['prefill' + key]:>13.3f} "
              f"{r1['prefill' + key]:>7.3f} | {r0['decode' + key]:>12.3f} {r1['decode' + key]:>7.3f} | {r0['prefilled_tokens']:>17} "
              f"{r1['prefilled_tokens']:>6} | {s}, {g:.1e}")
    totals = {str(on).lower(): {k: sum(r[k] for r in m["rows"]) for k in ("prefill_s", "decode_s", "prefill_cpu_s",
                                                                         "decode_cpu_s", "generate_s", "prefilled_tokens")}
              for on, m in modes.items()}
    for on in ("false", "true"):
        print(f"prefix_cache={on:<5}: prefill {totals[on]['prefill_s']:.2f} s ({totals[on]['prefill_cpu_s']:.2f} CPU s), "
              f"decode {totals[on]['decode_s']:.2f} s ({totals[on]['decode_cpu_s']:.2f} CPU s), "
              f"generate {totals[on]['generate_s']:.2f} s, {totals[on]['prefilled_tokens']} tokens prefilled")
    for m in modes.values():
        m["pool"].close()
    slug = host_machine().split(" ")[0]
    out = Path(args.out or HERE / "results" / f"prefix_cache_speed-{args.model}-{slug}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    import json

    result = {"benchmark": "prefix_cache_speed", "model": args.model, "machine": host_machine(), "device": device,
              "device_name": torch.cuda.get_device_name() if device == "cuda" else None,
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "git_commit": git_commit(),
              "batch_size": len(specs), "turns": args.turns, "max_new_tokens": args.max_new_tokens,
              "frame": [w, h], "memory": "va", "torch_threads": torch.get_num_threads(),
              "load_1m_end": os.getloadavg()[0], "dtype": str(next(model.parameters()).dtype),
              "same_answers_per_turn": same, "max_logprob_gap_per_turn": gaps, "totals": totals,
              "rows": modes[False]["rows"] + modes[True]["rows"]}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
