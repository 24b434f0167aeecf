"""What scoring each row's own span saves (``policy_ops.score_tokens``, issue 24), side by side in one run.

A PPO micro-batch mixes turn-1 samples (short prefix) and turn-2 ones (the whole conversation), right
padded to the longest. Scoring every row from the batch's *earliest* answer start ("shared start", the
code before 2026-12-06) materialises ``B × (width − min start) × vocab`` logits and as many fp32
log-softmax values; scoring each row's own answer span ("own spans") keeps the union of the answer
positions. Both modes run forward + backward on the same batch; the table gives the logit positions
kept, the fp32 log-softmax elements, seconds, and peak memory (CUDA: ``max_memory_allocated``; CPU: each
mode in a fresh subprocess, peak RSS).

The model is ``qwen25vl-small-random``'s shape with the published 152,064-entry vocabulary (the cost
under test scales with it), text-only rows: B rows alternating a short and a long prefix, each
followed by an ``--answer``-token answer.

    python benchmarks/score_spans.py                       # CPU, 4 rows of 1,100 / 2,200 + 128 tokens
    python benchmarks/score_spans.py --device cuda --model qwen25vl7b-random
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from common import git_commit, machine, write_results

VOCAB_7B = 152064


def build(name: str, device: str):
    import torch
    import transformers as T
    from rollout_throughput import qwen25vl_7b_config, qwen_processor

    tok = qwen_processor().tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>",
                                                      "<|vision_start|>", "<|vision_end|>")}
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=VOCAB_7B,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]})
    config = qwen25vl_7b_config(ids, **({} if name == "qwen25vl7b-random" else {"text": small}))
    torch.manual_seed(0)
    with torch.device(device):
        model = T.AutoModelForImageTextToText.from_config(
            config, dtype=torch.bfloat16 if device != "cpu" else torch.float32)
    return model


def run_mode(args: argparse.Namespace, mode: str) -> dict:
    import torch

    from spatialrl.train.policy_ops import score_tokens

    model = build(args.model, args.device)
    model.train()
    gen = torch.Generator().manual_seed(1)
    lengths = [(args.short if b % 2 == 0 else args.long) for b in range(args.rows)]
    width = max(lengths) + args.answer
    ids = torch.randint(10, 1000, (args.rows, width), generator=gen)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        mask[b, :n + args.answer] = 1
    inputs = {"input_ids": ids.to(args.device), "attention_mask": mask.to(args.device)}
    starts, ends = lengths, [n + args.answer for n in lengths]
    shared = mode == "shared start"
    kept = []
    head = model.get_output_embeddings().register_forward_hook(lambda _m, a, _o: kept.append(a[0].shape[1]))
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        if shared:
            sc = score_tokens(model, inputs, min(starts), 1.0, with_entropy=True)
        else:
            sc = score_tokens(model, inputs, starts, 1.0, with_entropy=True, end=ends)
        loss = sum(sc.logp[b, s:e].sum() + sc.entropy[b, s:e].sum() for b, (s, e) in enumerate(zip(starts, ends)))
        loss.backward()
        model.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
    head.remove()
    logp = sc.logp.detach().float().cpu()
    per_row = sum(e - s for s, e in zip(starts, ends)) if not shared else args.rows * (width - min(starts))
    peak = (torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    return {"mode": mode, "logit_positions_kept": kept[-1], "log_softmax_rows": per_row,
            "log_softmax_gib_fp32": per_row * VOCAB_7B * 4 / 2**30, "seconds": min(seconds),
            "peak_gib": peak, "peak_kind": "cuda max_memory_allocated" if args.device == "cuda" else "process peak RSS",
            "answer_logp_sum": float(sum(logp[b, s:e].sum() for b, (s, e) in enumerate(zip(starts, ends))))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen25vl-small-random", choices=["qwen25vl-small-random", "qwen25vl7b-random"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--short", type=int, default=1100, help="prefix tokens of the even rows (turn 1)")
    ap.add_argument("--long", type=int, default=2200, help="prefix tokens of the odd rows (turn 2)")
    ap.add_argument("--answer", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2, help="the fastest is reported")
    ap.add_argument("--mode", default=None, help=argparse.SUPPRESS)  # one mode, in a subprocess (CPU peak RSS)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args, args.mode)))
        return
    rows = []
    for mode in ("shared start", "own spans"):
        if args.device == "cpu":  # a fresh process per mode: peak RSS is per process
            cmd = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
        else:
            rows.append(run_mode(args, mode))
    print(f"{args.model} on {args.device}; {args.rows} rows of {args.short}/{args.long} prefix + {args.answer} answer tokens, "
          f"vocabulary {VOCAB_7B}, forward + backward")
    print(f"{'mode':<13} {'logit pos':>9} {'lsm rows':>8} {'lsm GiB':>8} {'seconds':>8} {'peak GiB':>9}  logp sum")
    for r in rows:
        print(f"{r['mode']:<13} {r['logit_positions_kept']:>9} {r['log_softmax_rows']:>8} {r['log_softmax_gib_fp32']:>8.2f} "
              f"{r['seconds']:>8.2f} {r['peak_gib']:>9.2f}  {r['answer_logp_sum']:.4f}")
    write_results(Path(args.out), f"score_spans-{args.model}", None, {
        "benchmark": "score_spans", "machine": machine(), "git_commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
