"""Speed of writing the SFT dataset's images (``spatialrl.io.ImageStore``), the part of `spatialrl data sft`
that is per frame: before (PIL PNG encode, then a temp file, rename and fsync per image) vs now (OpenCV
encode, plain write inside the folder under construction), side by side on the same frames.

The frames are real TVR renders (a small generated bench's expert episodes at the given size). Each run
writes every frame once into a fresh folder; prints a table (ms per frame, median over runs); results:
benchmarks/results/image_store_speed-<host>[-<tag>].json (machine, date, commit).

    python benchmarks/image_store_speed.py --frames 400 --size 280x168 --runs 3
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import git_commit, machine, write_results


def frames(n: int, width: int, height: int) -> list[np.ndarray]:
    """``n`` distinct frames of expert episodes of a small generated bench."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench
    from spatialrl.train.data import build_sft_dataset

    with tempfile.TemporaryDirectory() as tmp:
        sizes = {"eval": 0, "sft": max(8, n // 10), "rl": 0, "diag_rotate": 0, "diag_move": 0}
        make_bench(Path(tmp) / "bench", BenchConfig.preset(seed=3, sizes=sizes, scenes={"sft": 4, "eval": 0, "rl": 0}),
                   progress=False)
        suite = get_suite("tvr")
        opts = {**suite.default_options, "data": str(Path(tmp) / "bench"), "split": "sft", "memory": "ao",
                "width": width, "height": height}
        build_sft_dataset(suite, opts, Path(tmp) / "data", samples="step", progress=False, expert_noise=0.3)
        from PIL import Image

        paths = sorted((Path(tmp) / "data" / "images").glob("*.png"))[:n]
        out = [np.asarray(Image.open(p).convert("RGB")) for p in paths]
    if len(out) < n:
        raise SystemExit(f"the bench gave {len(out)} distinct frames, fewer than --frames {n}")
    return out


def write_before(root: Path, arrays: list[np.ndarray]) -> None:
    """The store as it was until 2026-12-05: PIL PNG, then atomic_write_bytes (temp, fsync, rename)."""
    import hashlib

    from PIL import Image

    from spatialrl.io import atomic_write_bytes

    (root / "images").mkdir(parents=True)
    for arr in arrays:
        digest = hashlib.sha256(np.asarray(arr.shape, np.int64).tobytes() + arr.tobytes()).hexdigest()[:32]
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="PNG", compress_level=1)
        atomic_write_bytes(root / f"images/{digest}.png", buf.getvalue())


def write_now(root: Path, arrays: list[np.ndarray]) -> None:
    from spatialrl.io import ImageStore

    store = ImageStore(root)
    for arr in arrays:
        store.put(arr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--size", default="280x168", help="frame size WxH")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tag", default=None, help="suffix of the results file name")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.lower().split("x"))
    arrays = frames(args.frames, w, h)
    times: dict[str, list[float]] = {"before": [], "now": []}
    for _ in range(args.runs):
        for name, fn in (("before", write_before), ("now", write_now)):  # interleaved: same load for both
            with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
                t = time.perf_counter()
                fn(Path(tmp), arrays)
                times[name].append((time.perf_counter() - t) / len(arrays) * 1000)
    rows = [{"writer": k, "ms_per_frame": statistics.median(v), "samples_ms": v} for k, v in times.items()]
    print(f"image store, {len(arrays)} frames {w}x{h}, median of {args.runs} runs")
    for r in rows:
        print(f"  {r['writer']:<7} {r['ms_per_frame']:6.2f} ms/frame  ({', '.join(f'{x:.2f}' for x in r['samples_ms'])})")
    print(f"  ratio   {rows[0]['ms_per_frame'] / rows[1]['ms_per_frame']:.2f}x")
    write_results(args.out, "image_store_speed", args.tag,
                         {"benchmark": "image_store_speed", "machine": machine(), "git_commit": git_commit(),
                          "date": datetime.now(UTC).isoformat(timespec="seconds"), "frames": len(arrays),
                          "width": w, "height": h, "rows": rows})


if __name__ == "__main__":
    main()
