"""Renderer and house-generator speed: frames/s at 224x224 and 640x360 for batches of 1/8/64
cameras on generated houses, instance-id frames, 1024x512 panoramas, and house generation time.

    python benchmarks/render_speed.py                 # prints a table, writes benchmarks/results/
    python benchmarks/render_speed.py --seconds 0.5   # quicker, noisier

Poses are TVR-like: random reachable cells, yaw in 45 degree steps, pitch in {-30, 0, 30}. Both wall
time (frames/s) and CPU time per frame are reported: on a shared machine wall time depends on what
else runs (the load average is recorded), CPU time much less so; frames per CPU-second times the
number of cores is what an otherwise idle machine can deliver (llvmpipe uses every core). Batch 1
at 640x360 is one TVR step with the frame cache off.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from spatialrl.io import atomic_write_json
from spatialrl.render import Camera, Renderer
from spatialrl.worlds.houses import generate_house

SIZES = ((224, 224), (640, 360))
BATCHES = (1, 8, 64)


def poses(house, n: int, rng: np.random.Generator) -> list[Camera]:
    cells = sorted(house.reachable)
    out = []
    for _ in range(n):
        x, z = house.cell_to_world(cells[int(rng.integers(len(cells)))])
        out.append(Camera((x, house.eye_height, z), 45.0 * int(rng.integers(8)), float(rng.choice([-30, 0, 30]))))
    return out


def timed(fn, frames_per_call: int, seconds: float) -> dict[str, float]:
    fn()  # warm-up: framebuffers, shader compilation
    calls, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        fn()
        calls += 1
        wall = time.perf_counter() - t0
        if wall >= seconds and calls >= 2:
            break
    cpu = time.process_time() - c0
    frames = calls * frames_per_call
    return {"fps": frames / wall, "ms_per_frame": 1e3 * wall / frames, "cpu_ms_per_frame": 1e3 * cpu / frames,
            "frames_per_cpu_second": frames / max(cpu, 1e-9), "frames": frames}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="minimum measuring time per cell of the table")
    ap.add_argument("--houses", type=int, default=3, help="houses of each kind (single, multi) to time and render")
    ap.add_argument("--machine", default=None, help="name for the results file (default: derived)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    console = Console()
    load_before = os.getloadavg()

    gen_times: dict[str, list[float]] = {"single": [], "multi": []}
    houses = []
    for kind in ("single", "multi"):
        for seed in range(args.houses):
            t = time.perf_counter()
            houses.append(generate_house(1000 + seed, kind))
            gen_times[kind].append(time.perf_counter() - t)

    rows = []
    device = ""
    for w, h in SIZES:
        with Renderer(w, h) as r:
            device = r.device_name
            for kind in ("single", "multi"):
                scenes = [(hs, r.upload(hs.meshes, hs.textures)) for hs in houses if hs.kind == kind]
                for batch in BATCHES:
                    rng = np.random.default_rng(batch)
                    sets = [(s, poses(hs, batch, rng)) for hs, s in scenes]
                    k = [0]

                    def step(ids: bool = False, sets=sets, k=k) -> None:
                        scene, cams = sets[k[0] % len(sets)]
                        k[0] += 1
                        (r.render_ids if ids else r.render)(scene, cams)

                    rgb = timed(step, batch, args.seconds)
                    ids = timed(lambda step=step: step(True), batch, args.seconds / 2)
                    rows.append({"width": w, "height": h, "kind": kind, "batch": batch, "rgb": rgb, "ids": ids})
                    console.print(f"{w}x{h} {kind:6s} batch {batch:2d}: {rgb['fps']:7.0f} fps "
                                  f"({rgb['cpu_ms_per_frame']:.2f} ms CPU/frame), ids {ids['fps']:.0f} fps")
    with Renderer(8, 8) as r:
        hs = houses[-1]
        scene = r.upload(hs.meshes, hs.textures)
        cells = sorted(hs.reachable)
        i = [0]

        def pano() -> None:
            x, z = hs.cell_to_world(cells[i[0] % len(cells)])
            i[0] += 7
            r.render_equirect(scene, (x, hs.eye_height, z), 1024, 512)

        pano_stats = timed(pano, 1, args.seconds)

    load_after = os.getloadavg()
    table = Table(title=f"render speed — {device}")
    # fps = frames per wall second; cpu ms = CPU time per frame; fps/cpu = frames per CPU second
    for col in ("size", "house", "batch", "fps", "ms", "cpu ms", "fps/cpu", "ids fps"):
        table.add_column(col, justify="right")
    for row in rows:
        rgb, ids = row["rgb"], row["ids"]
        table.add_row(f"{row['width']}x{row['height']}", row["kind"], str(row["batch"]), f"{rgb['fps']:.0f}",
                      f"{rgb['ms_per_frame']:.2f}", f"{rgb['cpu_ms_per_frame']:.2f}",
                      f"{rgb['frames_per_cpu_second']:.0f}", f"{ids['fps']:.0f}")
    console.print(table)
    console.print(f"1024x512 panorama (6 cube faces + remap): {pano_stats['fps']:.1f} /s "
                  f"({pano_stats['cpu_ms_per_frame']:.1f} ms CPU each)")
    for kind, ts in gen_times.items():
        console.print(f"generate_house({kind!r}): mean {np.mean(ts):.3f} s over {len(ts)} houses")
    console.print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} on {os.cpu_count()} CPUs")

    machine = args.machine or f"{'llvmpipe' if 'llvmpipe' in device.lower() else 'gpu'}-{os.cpu_count()}cpu"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    result = {
        "benchmark": "render_speed", "machine": machine, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": commit, "device": device, "cpus": os.cpu_count(), "platform": platform.platform(),
        "load_average_before": load_before, "load_average_after": load_after, "seconds_per_cell": args.seconds,
        "houses": [h.house_id for h in houses], "render": rows,
        "panorama_1024x512": pano_stats,
        "generate_house_seconds": {k: {"mean": float(np.mean(v)), "max": float(np.max(v)), "n": len(v)}
                                   for k, v in gen_times.items()},
    }
    path = Path(args.out) / f"render_speed-{machine}.json"
    atomic_write_json(path, result)
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
