"""Preflight of the GPU jobs: does this machine's EGL render, and do batched frames equal single ones?

The batch path (render/layers.py) drives a few GL entry points itself through ``eglGetProcAddress``; a
driver that handles them differently from Mesa would show here, in seconds, rather than as a failed or
hung data stage minutes into a command. Prints one line (GL vendor/renderer, batch == single, ms per
frame) and exits 1 on a mismatch. Run under ``timeout``: a hang is a failure too.

    python scripts/gpu/render_check.py [--size 280x168]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from spatialrl.render import Camera, Renderer
from spatialrl.render.primitives import MeshBuilder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="280x168", help="frame size WxH")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    b = MeshBuilder()
    for center, size, color, iid in (((0, 1.5, 3), (0.5, 0.5, 0.5), (1, 0, 0), 1),
                                     ((2, 1, 2), (1, 2, 0.5), (0, 1, 0), 2),
                                     ((0, 0, 0), (8, 0.1, 8), (0.5, 0.5, 0.5), 0)):
        b.box(center, size, color, instance_id=iid)
    cams = [Camera((0.0, 1.5, 0.0), yaw, pitch) for yaw in range(0, 360, 30) for pitch in (-30, 0, 30)]
    with Renderer(w, h) as r:
        info = r.ctx.info
        scene = r.upload(b.meshes())
        t0 = time.perf_counter()
        batch = r.render(scene, cams)
        dt = time.perf_counter() - t0
        singles = np.stack([r.render(scene, [c])[0] for c in cams])
        ok = np.array_equal(batch, singles) and batch.std() > 0
        # the asynchronous readbacks (issue 21): "pbo_rgb" (the GL packs RGB) is what readback="auto" (the
        # default) uses on a GPU, so it and "pbo" must give the synchronous path's frames
        items = [(scene, c) for c in cams] * 3  # several chunks at the larger sizes
        sync = r.render_batch(items, readback="sync")
        pbo_ok = np.array_equal(r.render_batch(items, readback="pbo"), sync)
        rgb_ok = np.array_equal(r.render_batch(items, readback="pbo_rgb"), sync)
    print(f"render check: {info.get('GL_VENDOR')} / {info.get('GL_RENDERER')}; {len(cams)} frames {w}x{h}: "
          f"batch {'==' if ok else '!='} single; {1000 * dt / len(cams):.2f} ms/frame batched (readback "
          f"{r.readback}); pbo readback {'==' if pbo_ok else '!='} sync; pbo_rgb {'==' if rgb_ok else '!='} sync",
          flush=True)
    return 0 if ok and pbo_ok and rgb_ok else 1


if __name__ == "__main__":
    sys.exit(main())
