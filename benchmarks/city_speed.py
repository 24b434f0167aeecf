"""Generated-city speed and size: panoramas per second, `make-city --tiny` wall time, disk per 1,000 routes.

    python benchmarks/city_speed.py [--panos 60] [--label vm]

Measures, on this machine:

- panoramas/s at 1024x512 and 2048x1024 (render + north-rotation roll + JPEG encode, the work
  `make-city` does per panorama), in a tiny city (one scene) and in a full-size metro tile scene;
- the wall time of `make-city --tiny` (20 routes, 512x256 panoramas, contact sheet included);
- the size on disk per 1,000 routes, extrapolated (and said so): a 1,000-route city uses
  essentially every panorama of a full-size city (routes cover its streets), so the estimate is
  (panoramas of the full city) x (mean JPEG size measured on a sample) + the route/pano index files.

Prints a table and writes benchmarks/results/city_speed-<label>.json with machine, date, git
commit and the load average (this machine is shared: background load slows every number).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from common import git_commit, machine  # noqa: E402  (benchmarks/ is on sys.path)

from spatialrl.envs.virl.city import make_city
from spatialrl.worlds.city.geometry import build_meshes
from spatialrl.worlds.city.panorama import PanoramaRenderer
from spatialrl.worlds.city.world import build_city


def pano_rate(pr: PanoramaRenderer, panos: list[int], width: int) -> tuple[float, float, float]:
    """(panoramas/s, CPU seconds per panorama, mean JPEG bytes) rendering + encoding ``panos``."""
    pr.panorama(panos[0], width, 0)  # uploads the scene, builds the remap tables
    sizes = []
    t0, c0 = time.perf_counter(), time.process_time()
    for k, p in enumerate(panos[1:]):
        img = pr.panorama(p, width, 37 * k)
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
        sizes.append(len(buf))
    n = len(panos) - 1
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n, float(np.mean(sizes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--panos", type=int, default=60, help="panoramas per speed measurement")
    ap.add_argument("--label", default="vm", help="machine label in the results file name")
    args = ap.parse_args()
    rows: list[dict] = []
    load_before = os.getloadavg()

    tiny = build_city("metro", 0, tiny=True)
    with PanoramaRenderer(tiny) as pr:
        device = pr.device_name
        panos = list(range(min(args.panos + 1, len(tiny.panos))))
        for width in (1024, 2048):
            r, cpu, size = pano_rate(pr, panos, width)
            rows.append({"case": f"tiny metro city, {width}x{width // 2}", "panos_per_s": round(r, 2),
                         "cpu_s_per_pano": round(cpu, 4), "jpeg_kb": round(size / 1024, 1),
                         "triangles": pr.meshes.n_triangles})

    t0 = time.perf_counter()
    full = build_city("metro", 0)
    meshes = build_meshes(full)
    build_s = time.perf_counter() - t0
    with PanoramaRenderer(full, meshes) as pr:
        tiles: dict = {}
        for p in range(len(full.panos)):
            tiles.setdefault(pr.tile_of(p), []).append(p)
        busiest = max(tiles.values(), key=len)[: args.panos + 1]
        sample_sizes = {}
        for width in (1024, 2048):
            r, cpu, size = pano_rate(pr, busiest, width)
            sample_sizes[width] = size
            rows.append({"case": f"full metro city (tile scene), {width}x{width // 2}", "panos_per_s": round(r, 2),
                         "cpu_s_per_pano": round(cpu, 4), "jpeg_kb": round(size / 1024, 1),
                         "triangles": pr._scene.n_triangles})
        t0 = time.perf_counter()
        pr._tile = None
        pr._scene_for(busiest[0])
        upload_s = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = make_city("metro", 20, 0, Path(tmp) / "tiny", tiny=True, progress=False)
        tiny_s = time.perf_counter() - t0
        tiny_bytes = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        manifest = json.loads((out / "city.json").read_text())

    index_kb_per_route = 4.1  # route_infos.json ~4 KB per route; pkl + metadata ~0.2 KB per pano (tiny city)
    per_1000 = {w: (len(full.panos) * (sample_sizes[w] + 160) + 1000 * index_kb_per_route * 1024) / 2**30
                for w in (1024, 2048)}
    result = {
        "benchmark": "city_speed",
        "machine": machine(),
        "render_device": device,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "rows": rows,
        "full_metro": {"build_s": round(build_s, 1), "panos": len(full.panos), "tiles": len(tiles),
                       "tile_upload_s": round(upload_s, 2), "triangles": meshes.n_triangles},
        "make_city_tiny": {"wall_s": round(tiny_s, 1), "bytes": tiny_bytes, "panoramas": manifest["panoramas"]["count"],
                           "timing_s": manifest["timing_s"]},
        "size_per_1000_routes_gib_extrapolated": {f"{w}x{w // 2}": round(v, 2) for w, v in per_1000.items()},
        "size_note": "extrapolated: all panoramas of a full metro city x mean JPEG size of a sampled tile, "
                     "+ route_infos.json (~4.1 KB per route)",
    }
    print(f"machine: {result['machine']} | {device} | load {result['load_average_before_after']}")
    print(f"{'case':52s} {'panos/s':>8s} {'cpu s/pano':>11s} {'jpeg KB':>8s}")
    for r in rows:
        print(f"{r['case']:52s} {r['panos_per_s']:8.2f} {r['cpu_s_per_pano']:11.4f} {r['jpeg_kb']:8.1f}")
    print(f"make-city --tiny: {tiny_s:.1f} s, {tiny_bytes / 2**20:.1f} MiB; full metro: {len(full.panos)} panos, "
          f"build {build_s:.1f} s, tile upload {upload_s:.2f} s")
    print("size per 1,000 routes (extrapolated): " + ", ".join(f"{k}: {v} GiB" for k, v in
                                                               result["size_per_1000_routes_gib_extrapolated"].items()))
    out_path = Path(__file__).parent / "results" / f"city_speed-{args.label}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
