"""Operations, host syncs and time per SFT update of a Qwen-VL model: transformers' code vs our speed-ups.

Why (issue 19): on the H200 the 8M TVR model trained at 65-90 samples/s (2026-12-05) — launch-bound, not
compute-bound. Each row adds one fix (``models/qwen_vision.py``, ``train/tensor_data.mrope_position_ids``)
to the same model and batch and counts, for one forward + backward: aten operations (each a kernel launch
on a GPU), ``item()``-style host syncs, and the median wall time. The loss must be equal in every row.

    python benchmarks/qwen_vision_ops.py                       # shipped TVR recipe, 280x168, batch 16 and 32
    python benchmarks/qwen_vision_ops.py --device cuda --batch-sizes 32,128

The batch: two-frame chats (``train/image_tasks.py``'s ``same_pattern``) at the recipe's frame size — the
shape of a TVR action-only sample (two frames, a short text), with fewer text tokens.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from common import git_commit, machine, write_results

ARMS = ("transformers", "+ batched attention", "+ grid memo", "+ rope positions")


def prepared(model, arm: str):
    from spatialrl.models.qwen_vision import batch_vision_attention, memoise_vision_metadata

    model = copy.deepcopy(model)
    if ARMS.index(arm) >= 1:
        batch_vision_attention(model)
    if ARMS.index(arm) >= 2:
        memoise_vision_metadata(model)
    return model


def arm_batch(batch: dict, arm: str, processor, model) -> dict:
    if ARMS.index(arm) < 3:
        return batch
    from spatialrl.train.tensor_data import image_settings, mrope_position_ids

    s = image_settings(processor)
    rows, cols = (int(v) // s["merge"] for v in batch["image_grid_thw"][0, 1:].tolist())
    pos = mrope_position_ids(batch["input_ids"], batch["attention_mask"].bool(), model.config.image_token_id, (rows, cols))
    return {**batch, "position_ids": pos}


def main() -> None:
    from torch.profiler import ProfilerActivity, profile

    from spatialrl.train.common import build_preset
    from spatialrl.train.config import SFTConfig, load_config
    from spatialrl.train.image_tasks import _encode, make_chat
    from spatialrl.train.sft import token_loss

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).parent.parent / "configs/sft/tvr_ao_small.yaml"))
    ap.add_argument("--size", default="280x168", help="frame size WxH")
    ap.add_argument("--batch-sizes", default="16,32")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    cfg = load_config(SFTConfig, args.config)
    base, processor, _ = build_preset(cfg.model.path.split(":", 1)[1], dict(cfg.model.preset_overrides or {}), 0)
    base = base.to(args.device).train()
    device = torch.device(args.device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    rows = []
    print(f"{'batch':>5}  {'arm':<22}{'aten ops':>10}{'syncs':>8}{'ms/update':>11}{'x':>6}  loss")
    for bs in (int(b) for b in args.batch_sizes.split(",")):
        rng = np.random.default_rng(0)
        batch = _encode(processor, base, [make_chat("same_pattern", rng, height, width) for _ in range(bs)])
        first_ms = None
        for arm in ARMS:
            model = prepared(base, arm)
            inputs = arm_batch(batch, arm, processor, model)

            def update(model=model, inputs=inputs) -> float:
                model.zero_grad(set_to_none=True)
                loss_sum, count, _ = token_loss(model, inputs)
                (loss_sum / count).backward()
                return (loss_sum / count).item()

            loss = update()  # warm-up (and the grid memo's first fill)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
            with profile(activities=activities) as prof:
                update()
            events = prof.key_averages()
            ops = sum(e.count for e in events if e.key.startswith("aten::"))
            syncs = sum(e.count for e in events if e.key == "aten::_local_scalar_dense")
            times = []
            for _ in range(args.repeats):
                sync()
                t = time.perf_counter()
                update()
                sync()
                times.append((time.perf_counter() - t) * 1000)
            ms = statistics.median(times)
            first_ms = first_ms or ms
            rows.append({"batch_size": bs, "arm": arm, "aten_ops": ops, "syncs": syncs, "ms_per_update": ms,
                         "samples_per_s": bs / ms * 1000, "loss": loss})
            print(f"{bs:>5}  {arm:<22}{ops:>10}{syncs:>8}{ms:>11.1f}{first_ms / ms:>6.2f}  {loss:.6f}")
            del model
    write_results(args.out, "qwen_vision_ops", args.tag, {
        "benchmark": "qwen_vision_ops", "machine": machine(), "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None, "threads": torch.get_num_threads(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(), "config": args.config,
        "size": [width, height], "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
