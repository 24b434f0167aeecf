"""Rollout throughput: V-IRL VL env steps/min of one model at batch 1 vs 8/32/128, env time included.

Every row goes through the real loop: the lead's batched runner (``spatialrl.rollout.runner``), the
V-IRL VL env rendering 2405² grids from 2048x1024 panoramas, the prompter, and ``HFPolicy.generate``
with responses fixed at 64 tokens (``min_new_tokens``), so rows differ only in batch size. A warm-up
(random agent, then one model turn at the largest batch) runs first and is not counted: it fills the
env's grid cache and the GPU kernels' caches, so B=1 is not charged for them. Each row runs for
``--row-seconds`` and ends at the next turn boundary; steps/min = completed env steps / elapsed time
from the row's first ``generate`` call (env construction is setup, not charged).

Models: ``llama11b-random`` — the Llama-3.2-11B-Vision configuration (Mllama, 10.7B parameters) with
random weights in bf16 on the GPU (no download: the config is written out below, the tokenizer is our
BPE with the Llama-3 chat format, the image processor the stock Mllama one: 560² tiles, up to 4);
``builtin-small`` / ``builtin-tiny`` — our presets (fp32 on CPU); ``mllama-small-random`` — the 11B
code path at toy width, to check the script on a CPU.
``qwen25vl7b-random`` — Qwen2.5-VL-7B-Instruct's published architecture (8.3B: 28 decoder layers of
3584, a 32-block windowed vision tower), random weights in bf16, our BPE tokenizer in Qwen's ChatML and
Qwen's image processor capped at ``QWEN_MAX_PIXELS``; ``qwen25vl-small-random`` — that code path at toy
width, for a CPU.

The seed's rollout: 256 env steps in ~40 min per GPU process = 6.4 steps/min per GPU (batch 1).
Limit: per env step the model needs 2 x vision params x vision tokens + 2 x decoder params x (prompt +
64 tokens) + 2 x LM-head params x 64 FLOPs (attention-score FLOPs left out) and, per decode forward, one read of all weights; the script
measures the GPU's bf16 matmul rate and HBM bandwidth and reports the best row against
``60 / max(flops / rate, bytes / bandwidth)`` steps/min.

Run on the GPU machine (one command; writes benchmarks/results/rollout_throughput-<machine>.json):

    python benchmarks/rollout_throughput.py --model llama11b-random --batch-sizes 1 8 32 128

and on a CPU:

    python benchmarks/rollout_throughput.py --model builtin-small --batch-sizes 1 8 --device cpu --threads 1
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SEED_STEPS_PER_MIN = 256 / 40  # the seed: 256 steps per ~40 min per GPU process
QWEN_MODELS = ("qwen25vl7b-random", "qwen25vl-small-random")
MODELS = ("llama11b-random", "mllama-small-random", *QWEN_MODELS, "builtin-small", "builtin-tiny")


def llama_11b_vision_config():
    """Llama-3.2-11B-Vision's config.json values (MllamaConfig), written out: nothing is downloaded."""
    import transformers as T

    return T.MllamaConfig(
        text_config=dict(
            vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=40,
            num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
            cross_attention_layers=[3, 8, 13, 18, 23, 28, 33, 38], tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            bos_token_id=128000, eos_token_id=[128001, 128008, 128009], pad_token_id=128004),
        vision_config=dict(
            hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_global_layers=8, attention_heads=16,
            image_size=560, patch_size=14, max_num_tiles=4, intermediate_layers_indices=[3, 7, 15, 23, 30],
            vision_output_dim=7680, norm_eps=1e-5,
            supported_aspect_ratios=[[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]),
        image_token_index=128256,
    )


def mllama_small_config():
    """The 11B configuration's shape (560² tiles, up to 4, the same layer pattern) at toy width: checks
    the llama11b-random code path on a CPU in seconds."""
    import transformers as T

    cfg = llama_11b_vision_config()
    text = dict(cfg.text_config.to_dict(), hidden_size=64, intermediate_size=128, num_hidden_layers=5,
                num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[3], vocab_size=8192,
                bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = dict(cfg.vision_config.to_dict(), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                  num_global_layers=1, attention_heads=2, intermediate_layers_indices=[1, 3], vision_output_dim=96)
    return T.MllamaConfig(text_config=text, vision_config=vision, image_token_index=5)


# Qwen2.5-VL-7B-Instruct's published config.json (huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json,
# as transformers' Qwen2_5_VLConfig reads it), written out: nothing is downloaded.
QWEN25VL_7B_TEXT = dict(
    vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
    num_key_value_heads=4, max_position_embeddings=128000, rms_norm_eps=1e-6, hidden_act="silu",
    tie_word_embeddings=False, use_sliding_window=False,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]})
QWEN25VL_7B_VISION = dict(
    depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584, hidden_act="silu",
    patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
    tokens_per_second=2, in_channels=3)
# Pixels per image for the Qwen rows: the model card's suggested upper bound (1280 visual tokens after the 2x2
# merge). The published preprocessor allows 12845056 (a 2405² grid would be 7396 decoder tokens per image).
QWEN_MAX_PIXELS = 1280 * 28 * 28
QWEN_TOKENIZER_VOCAB = 8192  # our BPE's cap (the prompt corpus gives ~1.3k); the 7B keeps 152064 rows (qwen_random)


def qwen25vl_7b_config(ids: dict[str, int], text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None):
    """Qwen2.5-VL-7B's architecture (8.3B parameters) with our tokenizer's special-token ids; ``text`` /
    ``vision`` override config values (the small variant)."""
    import transformers as T

    special = dict(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    return T.Qwen2_5_VLConfig(
        text_config=dict(QWEN25VL_7B_TEXT, **special, **(text or {})), vision_config=dict(QWEN25VL_7B_VISION, **(vision or {})),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False, **special)


def qwen25vl_small_config(ids: dict[str, int]):
    """The 7B configuration's shape (window attention with full-attention blocks, 2x2 merge, M-RoPE) at toy
    width; its vocabulary is also larger than the tokenizer's, as the 7B's is: checks the code path on a CPU."""
    return qwen25vl_7b_config(
        ids, text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=QWEN_TOKENIZER_VOCAB + 512,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}),
        vision=dict(depth=4, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                    fullatt_block_indexes=[1, 3]))


def qwen_processor():
    """Qwen2.5-VL's processor with our BPE tokenizer (Qwen special tokens, ChatML template) trained on the
    prompt corpus, and Qwen's PIL image processor (14 px patches, 2x2 merge, at most ``QWEN_MAX_PIXELS``)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from spatialrl.models.processor import NoVideoQwen2_5_VLProcessor
    from spatialrl.models.tokenizer import (
        QWEN_CHAT_TEMPLATE,
        QWEN_SPECIAL_TOKENS,
        prompt_corpus,
        train_bpe_tokenizer,
    )

    tok = train_bpe_tokenizer(prompt_corpus()[0], QWEN_SPECIAL_TOKENS, QWEN_TOKENIZER_VOCAB, QWEN_CHAT_TEMPLATE,
                              eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ip = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=QWEN_MAX_PIXELS, patch_size=14, merge_size=2,
                                  temporal_patch_size=2)
    return NoVideoQwen2_5_VLProcessor(ip, tok, chat_template=QWEN_CHAT_TEMPLATE)


def qwen_random(name: str, device: str, dtype: Any, seed: int = 0):
    """``(model, processor)`` for ``qwen25vl7b-random`` / ``qwen25vl-small-random``, built on ``device``.

    The vocabulary: the model keeps the published 152064 rows (embedding + LM head are 1.09B of the 8.3B
    parameters, and the full-vocabulary logits are what the epochs' memory and the LM head's FLOPs pay for),
    rather than shrinking to our tokenizer (BPE trained on the prompt corpus: ~1.3k ids, as the Llama rows
    use; Qwen's own 151k-entry tokenizer cannot be built offline). Ids past the tokenizer are valid embedding
    rows, sampled like any other by a random model, and decode to nothing; the small variant keeps such a
    gap too, so the CPU check covers it.
    """
    import torch
    import transformers as T

    processor = qwen_processor()
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>",
                                                      "<|vision_start|>", "<|vision_end|>")}
    config = qwen25vl_7b_config(ids) if name == "qwen25vl7b-random" else qwen25vl_small_config(ids)
    assert config.text_config.vocab_size >= len(tok)
    torch.manual_seed(seed)
    with torch.device(device):
        model = T.AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.bos_token_id = ids["<|endoftext|>"]
    return model, processor


def build_policy(name: str, device: str, new_tokens: int, seed: int = 0):
    import torch

    from spatialrl.agents.hf import HFPolicy

    if name in ("llama11b-random", "mllama-small-random"):
        import transformers as T

        from spatialrl.models.tiny import mllama_processor
        from spatialrl.models.tokenizer import prompt_corpus

        processor = mllama_processor(image_size=560, vocab_size=8192, texts=prompt_corpus()[0])
        config = llama_11b_vision_config() if name == "llama11b-random" else mllama_small_config()
        dtype = torch.bfloat16 if device != "cpu" else torch.float32
        torch.manual_seed(seed)
        with torch.device(device):
            model = T.AutoModelForImageTextToText.from_config(config, dtype=dtype)
        # Our tokenizer's special tokens live at ids 0..6; point the model's at them.
        tok = processor.tokenizer
        model.config.image_token_index = tok.convert_tokens_to_ids("<|image|>")
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        return HFPolicy(model, processor, name=name, device=device, dtype=dtype, min_new_tokens=new_tokens)
    if name in QWEN_MODELS:
        dtype = torch.bfloat16 if device != "cpu" else torch.float32
        model, processor = qwen_random(name, device, dtype, seed)
        return HFPolicy(model, processor, name=name, device=device, dtype=dtype, min_new_tokens=new_tokens)
    if name in ("builtin-small", "builtin-tiny"):
        from spatialrl.models.builtin import build_model

        model, processor, _ = build_model(name.split("-")[1], seed=seed)
        return HFPolicy(model, processor, name=name, device=device, min_new_tokens=new_tokens)
    raise SystemExit(f"unknown --model {name!r}")


class _OutOfTime(Exception):
    """Raised at the start of a turn once a row's time budget is spent (ends the row between turns)."""


class Timed:
    """Wraps a policy: adds up the seconds in ``generate`` and ends a row between turns after ``budget_s``.

    The clock starts at the first ``generate`` call, so env construction and first resets (setup) are
    not charged; every counted step belongs to a turn that finished completely.
    """

    def __init__(self, policy: Any, budget_s: float = float("inf")):
        self.policy, self.name, self.budget_s = policy, policy.name, budget_s
        self.gen_seconds, self.start, self.stop, self.steps = 0.0, None, None, 0

    def generate(self, conversations, sampling, infos=None):
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        elif now - self.start > self.budget_s:
            self.stop = now
            raise _OutOfTime
        out = self.policy.generate(conversations, sampling, infos)
        _sync()
        self.gen_seconds += time.perf_counter() - now
        return out

    def on_turn(self, *args: Any) -> None:
        self.steps += 1


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_row(suite, options, policy, episodes, batch_size, sampling, budget_s, env_threads=1) -> dict[str, float]:
    """Run episodes with ``policy`` at ``batch_size`` for about ``budget_s`` seconds; steps/min and split."""
    from spatialrl.rollout.runner import run_episodes

    timed = Timed(policy, budget_s)
    try:
        run_episodes(suite, options, timed, episodes, batch_size=batch_size, sampling=sampling, progress=False,
                     on_turn=timed.on_turn, env_threads=env_threads)
        timed.stop = time.perf_counter()
    except _OutOfTime:
        pass
    seconds = timed.stop - timed.start
    return {"batch_size": batch_size, "env_steps": timed.steps, "seconds": seconds,
            "generate_seconds": timed.gen_seconds, "env_seconds": seconds - timed.gen_seconds,
            "steps_per_min": timed.steps / seconds * 60}


def measure_gpu(device: str) -> dict[str, float]:
    """bf16 dense matmul rate (TFLOP/s) and device-memory copy bandwidth (GB/s), measured here."""
    import torch

    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    reps = 50
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    tflops = 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12
    x = torch.empty(4 * 1024**3 // 2, device=device, dtype=torch.bfloat16)  # 4 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    gbps = 2 * x.numel() * 2 * 10 / (time.perf_counter() - t0) / 1e9  # read + write
    del a, b, x, y
    torch.cuda.empty_cache()
    return {"matmul_tflops": tflops, "hbm_gbps": gbps}


def param_split(model: Any) -> dict[str, int]:
    """Parameters by what they cost per token: ``vision`` (the tower, per image patch), ``text`` (the
    decoder's matmuls, per token: 2 FLOPs each), ``head`` (per scored/generated position only), ``total``."""
    inner = getattr(model, "model", model)
    tower = getattr(inner, "vision_model", None) or getattr(inner, "visual", None)  # Mllama / Qwen
    vision = sum(p.numel() for p in tower.parameters()) if tower is not None else 0
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()  # a lookup, not a matmul
    head = model.get_output_embeddings().weight.numel()
    return {"vision": vision, "text": total - vision - embed - head, "head": head, "total": total}


def step_cost(policy: Any, prompt_tokens: float, new_tokens: int, grid: int) -> dict[str, float]:
    """FLOPs and weight bytes one env step needs (dense-matmul count: 2 x params x tokens)."""
    model = policy.model
    inner = getattr(model, "model", model)
    split = param_split(model)
    vision, text, head, total = split["vision"], split["text"], split["head"], split["total"]
    vis_tokens = 0
    if hasattr(inner, "vision_model"):  # Mllama: tiles x (patches + class token)
        cfg = model.config.vision_config
        tiles = min(cfg.max_num_tiles, math.ceil(grid / cfg.image_size) ** 2)
        vis_tokens = tiles * ((cfg.image_size // cfg.patch_size) ** 2 + 1)
    elif hasattr(inner, "visual"):  # Qwen: the processor's resized grid in 14 px patches (the merge is after the tower)
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        ip = policy.processor.image_processor
        h, w = smart_resize(grid, grid, factor=ip.patch_size * ip.merge_size, min_pixels=ip.size["shortest_edge"],
                            max_pixels=ip.size["longest_edge"])
        vis_tokens = (h // ip.patch_size) * (w // ip.patch_size)
    flops = 2 * vision * vis_tokens + 2 * text * (prompt_tokens + new_tokens) + 2 * head * new_tokens
    weight_bytes = total * next(model.parameters()).element_size()
    return {"params": total, "vision_params": vision, "vision_tokens": vis_tokens, "prompt_tokens": prompt_tokens,
            "flops_per_step": flops, "weight_bytes": weight_bytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama11b-random", choices=MODELS)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--grid-size", type=int, default=2405)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--row-seconds", type=float, default=60.0,
                    help="time per batch size; a row ends at the first turn boundary after it")
    ap.add_argument("--routes", type=int, default=16)
    ap.add_argument("--pano-width", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (1 on a shared CPU: spinning OpenMP threads of a busy machine "
                         "made 64-token generation 6x slower there)")
    ap.add_argument("--env-threads", type=int, default=min(16, os.cpu_count() or 1),
                    help="threads stepping the batch's envs (V-IRL envs are thread-safe)")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/rollout_throughput-<machine>.json)")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from spatialrl.agents.base import SamplingParams
    from spatialrl.agents.random import RandomPolicy
    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.virl.testdata import random_routes, write_dataset
    from spatialrl.io import atomic_write_json
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        machine = f"{platform.node() or 'cpu'} ({os.cpu_count()} cpu, {platform.processor() or platform.machine()})"
    else:
        machine = torch.cuda.get_device_name(0)
    tmp = Path(tempfile.mkdtemp(prefix="rollout-throughput-"))
    data = write_dataset(tmp / "city", random_routes(args.routes, seed=0),
                         pano_size=(args.pano_width, args.pano_width // 2))
    suite = get_suite("virl")
    sampling = SamplingParams(max_new_tokens=args.new_tokens)
    # More episodes than any row can finish: rows end on their time budget, never on an empty queue.
    options = {"data": str(data), "mode": "vl", "grid_size": args.grid_size, "episodes": 8 * max(args.batch_sizes)}
    episodes = suite.episodes(options)

    env_only = timed_row(suite, options, RandomPolicy(seed=0), episodes, max(args.batch_sizes), sampling,
                         args.row_seconds / 2, args.env_threads)
    env_rate = env_only["steps_per_min"]
    print(f"env + prompts only (random agent; warms the grid cache): {env_rate:,.0f} steps/min "
          f"({env_only['env_steps']} steps)")

    policy = build_policy(args.model, device, args.new_tokens)
    warm = episodes[: max(args.batch_sizes)]
    timed_row(suite, options, policy, warm, max(args.batch_sizes), sampling, 0.0)  # one turn: warm-up

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    slug = "".join(c if c.isalnum() else "-" for c in machine.lower()).strip("-")[:40]
    out = Path(args.out or Path(__file__).parent / "results" / f"rollout_throughput-{args.model}-{slug}.json")
    header = {
        "benchmark": "rollout_throughput", "model": args.model, "machine": machine, "device": device,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "git_commit": commit,
        "torch": torch.__version__, "grid_size": args.grid_size, "new_tokens": args.new_tokens,
        "pano_size": [args.pano_width, args.pano_width // 2], "routes": args.routes,
        "row_seconds": args.row_seconds, "torch_threads": torch.get_num_threads(),
        "seed_steps_per_min_per_gpu": SEED_STEPS_PER_MIN, "env_only_steps_per_min": env_rate,
    }
    rows = []
    for bs in args.batch_sizes:
        usage0 = dict(policy.usage)
        row = timed_row(suite, options, policy, episodes, bs, sampling, args.row_seconds, args.env_threads)
        requests = policy.usage["requests"] - usage0["requests"]
        row["mean_prompt_tokens"] = (policy.usage["prompt_tokens"] - usage0["prompt_tokens"]) / max(1, requests)
        row["oom_splits"] = policy.usage["oom_splits"] - usage0["oom_splits"]
        rows.append(row)
        print(f"batch {bs}: {row['steps_per_min']:,.1f} steps/min ({row['env_steps']} steps in {row['seconds']:.0f}s)")
        # after every row: a run cut by its time limit keeps what it measured
        atomic_write_json(out, {**header, "load_average_1m": os.getloadavg()[0], "rows": rows, "partial": True})
    base = rows[0]["steps_per_min"]
    for r in rows:
        r["speedup_vs_b1"] = r["steps_per_min"] / base if rows[0]["batch_size"] == 1 else None
        r["x_seed_per_gpu"] = r["steps_per_min"] / SEED_STEPS_PER_MIN

    limit: dict[str, Any] = {}
    if device != "cpu":
        best = max(rows, key=lambda r: r["steps_per_min"])
        gpu = measure_gpu(device)
        cost = step_cost(policy, best["mean_prompt_tokens"], args.new_tokens, args.grid_size)
        compute_s = cost["flops_per_step"] / (gpu["matmul_tflops"] * 1e12)
        weights_s = args.new_tokens * cost["weight_bytes"] / (gpu["hbm_gbps"] * 1e9) / best["batch_size"]
        limit_rate = 60 / max(compute_s, weights_s)
        limit = {**gpu, **cost, "compute_s_per_step": compute_s, "weight_read_s_per_step": weights_s,
                 "limit_steps_per_min": limit_rate, "best_fraction_of_limit": best["steps_per_min"] / limit_rate}

    print(f"\n{args.model} on {machine}, V-IRL VL {args.grid_size}² grids, {args.new_tokens}-token responses")
    print(f"{'batch':>5} {'steps':>6} {'steps/min':>10} {'vs B=1':>7} {'x seed/GPU':>10} {'gen s':>7} {'env s':>7}")
    for r in rows:
        vs = f"{r['speedup_vs_b1']:.1f}x" if r["speedup_vs_b1"] else "-"
        print(f"{r['batch_size']:>5} {r['env_steps']:>6} {r['steps_per_min']:>10,.1f} {vs:>7} "
              f"{r['x_seed_per_gpu']:>9.1f}x {r['generate_seconds']:>7.1f} {r['env_seconds']:>7.1f}")
    print(f"env + prompts alone: {env_rate:,.0f} steps/min")
    if limit:
        print(f"limit: {limit['limit_steps_per_min']:,.0f} steps/min ({limit['flops_per_step'] / 1e12:.1f} TFLOP/step at "
              f"{limit['matmul_tflops']:.0f} TFLOP/s; weights {limit['weight_bytes'] / 1e9:.1f} GB at "
              f"{limit['hbm_gbps']:.0f} GB/s); best row = {100 * limit['best_fraction_of_limit']:.0f}% of it")

    atomic_write_json(out, {**header, "load_average_1m": os.getloadavg()[0], "rows": rows, "limit": limit})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
