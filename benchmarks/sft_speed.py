"""SFT input throughput: the per-sample collator path vs the tensor engine, side by side in one run.

Both rows train the same model on the same dataset with the same batch size (AdamW steps, bf16 autocast
on a GPU), and report samples/s and input tokens/s (every token the model reads: text + image tokens).
The tensor row's one-off compile time is reported separately, and the tensor row is timed again last
(``tensor engine (again)``) so that an effect of the rows' order shows instead of passing for a speed-up. ``--compile`` adds the tensor engine's row
with the model's repeated blocks compiled (``model.compile``: regional torch.compile, train/common.py
``compile_blocks``); its warmup steps take the compiles (for the first shape, then for dynamic shapes) and
their seconds are reported as ``warmup_s``.

    python benchmarks/sft_speed.py --data DIR [--preset small] [--batch-size 64] [--steps 30] [--workers 4] [--compile]

Results: benchmarks/results/sft_speed-<tag>.json with machine, date and commit.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
from common import git_commit, machine

from spatialrl.train.data import SFTDataset
from spatialrl.train.sft import Collator, micro_batches, token_loss
from spatialrl.train.tensor_data import TensorBatcher, compile_dataset

BUILTIN_OVERRIDES = dict(hidden_size=256, intermediate_size=768, num_layers=6, num_heads=4, num_kv_heads=2,
                         mrope_section=(8, 12, 12), vision_hidden=192, vision_intermediate=576, vision_depth=4,
                         vision_heads=3, fullatt_blocks=(1, 3))


# The compiled row's warmup: the blocks compile for the first batch width, again for dynamic widths at the
# next new width (on the 2-core VM, tiny preset: 14 s, then 62 s), and Qwen's vision blocks once more for each
# new number of attention chunks; timed steps before that would time the compiler.
COMPILE_WARMUP = 6


def build(preset: str, device: str):
    from spatialrl.models.family import model_family
    from spatialrl.train.common import build_preset

    model, processor, _ = build_preset(preset, BUILTIN_OVERRIDES if preset == "small" else {}, seed=0)
    model_family(model).prepare_model(model)  # the trainer's model: Qwen's vision tower without per-image loops
    return model.to(device).train(), processor


def run(batches, model, device: str, steps: int, warmup: int) -> dict[str, float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else torch.autocast("cpu", enabled=False)
    samples = tokens = 0
    t0 = None
    start = time.perf_counter()
    warmup_s = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            warmup_s = t0 - start
        batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
        with autocast:
            loss_sum, count, _ = token_loss(model, batch)
        (loss_sum / count.clamp(min=1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= warmup:
            samples += batch["input_ids"].shape[0]
            tokens += int(batch["attention_mask"].sum())
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {"samples_per_s": samples / dt, "input_tokens_per_s": tokens / dt, "seconds": dt, "steps": steps,
            "warmup_s": warmup_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="an SFT dataset folder (spatialrl data sft)")
    ap.add_argument("--preset", default="small", help="built-in preset (small = the shipped models' sizes)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers of the collator row")
    ap.add_argument("--compile", action="store_true",
                    help="also the tensor engine with the model's repeated blocks compiled (model.compile)")
    ap.add_argument("--skip-collator", action="store_true",
                    help="leave out the collator row (slow at large batches; the ratio column is then against the tensor row)")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--results-dir", type=Path, default=Path(__file__).parent / "results",
                    help="where the results JSON goes (default benchmarks/results)")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model, processor = build(args.preset, device)
    model_type = model.config.model_type
    dataset = SFTDataset(args.data)
    compile_warmup = max(args.warmup, COMPILE_WARMUP)  # the compiled row's first batches are its compiles
    n_batches = args.steps + (compile_warmup if args.compile else args.warmup)
    plan = list(micro_batches(len(dataset), 0, args.batch_size, 1, 0, 0, n_batches))

    from torch.utils.data import DataLoader

    rows = []
    if not args.skip_collator:
        loader = DataLoader(dataset, batch_sampler=plan, collate_fn=Collator(processor, model_type, None),
                            num_workers=args.workers, pin_memory=device == "cuda")
        rows.append({"path": f"collator ({args.workers} workers)", **run(iter(loader), model, device, args.steps, args.warmup)})
    t = time.perf_counter()
    folder = compile_dataset(args.data, processor, model_type, workers=args.workers)
    compile_s = time.perf_counter() - t
    batcher = TensorBatcher(folder, processor.tokenizer.pad_token_id, device)
    rows.append({"path": "tensor engine", "compile_s": compile_s,
                 **run((batcher.batch(ix) for ix in plan), model, device, args.steps, args.warmup)})
    # data.images_on_device=false: the frames memory-mapped on the host, copied per batch
    mapped = TensorBatcher(folder, processor.tokenizer.pad_token_id, device, images_on_device=False)
    rows.append({"path": "tensor, frames on host",
                 **run((mapped.batch(ix) for ix in plan), model, device, args.steps, args.warmup)})
    if args.compile:
        from spatialrl.train.common import compile_blocks

        compiled = copy.deepcopy(model)
        blocks = compile_blocks(compiled)
        rows.append({"path": "tensor + compile", "compiled_blocks": blocks,
                     **run((batcher.batch(ix) for ix in plan), compiled, device, args.steps, compile_warmup)})
    # the first tensor row is timed again last: on the H100 (2026-12-06, batch 512) it ran at 447 samples/s
    # first and the host-frames row after it at 842, so a row's place in the run can count for as much
    # as its path (first-shape kernel selection, allocator growth); the two tensor rows show that effect
    rows.append({"path": "tensor engine (again)",
                 **run((batcher.batch(ix) for ix in plan), model, device, args.steps, args.warmup)})
    base = rows[0]["samples_per_s"]
    print(f"{'path':<24} {'samples/s':>10} {'input tok/s':>12} {'× row 1':>10} {'warmup s':>9}")
    for r in rows:
        print(f"{r['path']:<24} {r['samples_per_s']:>10.1f} {r['input_tokens_per_s']:>12.0f} "
              f"{r['samples_per_s'] / base:>10.2f} {r['warmup_s']:>9.1f}")
    print(f"(tensor engine compile: {compile_s:.1f} s for {len(dataset)} samples, once per dataset and processor)")
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    result = {"benchmark": "sft_speed", "machine": machine(), "gpu": gpu, "device": device,
              "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(),
              "data": str(args.data), "samples_in_dataset": len(dataset), "preset": args.preset,
              "batch_size": args.batch_size, "rows": rows}
    tag = args.tag or (gpu or "cpu").replace(" ", "-").lower()
    out = args.results_dir / f"sft_speed-{Path(args.data).name}-{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
