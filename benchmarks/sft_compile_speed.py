"""Tensor-engine compile cost per sample: through the processor (ids + pixels, the collator's call) vs
the placeholder expansion the compile uses now (ids only; pixels are stored once as uint8), side by side.

    python benchmarks/sft_compile_speed.py DIR [DIR ...] [--samples 60]

Both paths run on the same samples with the shipped models' processor (small preset) and must give the
same token ids (checked). Results: benchmarks/results/sft_compile_speed-<tag>.json.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import git_commit, machine
from sft_speed import BUILTIN_OVERRIDES

from spatialrl.models.encode import encode_conversations
from spatialrl.train.common import build_preset
from spatialrl.train.data import SFTDataset
from spatialrl.train.tensor_data import encode_expanded, image_settings, resize_like_processor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="+", help="SFT dataset folders (spatialrl data sft)")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--tag", default="vm")
    args = ap.parse_args()
    _, processor, _ = build_preset("small", BUILTIN_OVERRIDES, seed=0)
    settings = image_settings(processor)
    rows = []
    for folder in args.data:
        data = SFTDataset(folder)
        convs = []
        for i in range(min(args.samples, len(data))):
            conv = data[i]["messages"]
            for m in conv:
                for part in m["content"]:
                    if part["type"] == "image":
                        part["image"] = resize_like_processor(part["image"], settings)
            convs.append(conv)
        t = time.perf_counter()
        slow = [encode_conversations(processor, [c])["input_ids"][0].numpy() for c in convs]
        t_slow = (time.perf_counter() - t) / len(convs)
        t = time.perf_counter()
        fast = [encode_expanded(processor, c, settings, str(i))[0] for i, c in enumerate(convs)]
        t_fast = (time.perf_counter() - t) / len(convs)
        assert all(np.array_equal(a, b) for a, b in zip(slow, fast, strict=True)), folder
        rows.append({"data": Path(folder).name, "task": data.meta.get("task"), "samples": len(convs),
                     "processor_ms": 1000 * t_slow, "expanded_ms": 1000 * t_fast})
    print(f"{'data':<16} {'samples':>7} {'processor ms':>13} {'expanded ms':>12} {'×':>6}")
    for r in rows:
        print(f"{r['data']:<16} {r['samples']:>7} {r['processor_ms']:>13.1f} {r['expanded_ms']:>12.1f} "
              f"{r['processor_ms'] / r['expanded_ms']:>6.1f}")
    out = Path(__file__).parent / "results" / f"sft_compile_speed-{args.tag}.json"
    out.write_text(json.dumps({"benchmark": "sft_compile_speed", "machine": machine(),
                               "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(),
                               "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
